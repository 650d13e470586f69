//! Standard output that may go away: `meshparity plan … | head` closes the pipe early, and
//! `> /dev/full` cannot be written. Rust's `print!` panics on both; here a broken pipe ends the
//! process quietly with success (as ripgrep does: the reader has what it wanted), and any
//! other write failure is one error line and the infrastructure exit code, never a panic.

use std::io::Write;

/// Install the hook; called first thing in `main`.
pub fn guard() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        if msg.starts_with("failed printing to stdout") {
            if msg.contains("Broken pipe") {
                std::process::exit(i32::from(crate::exit::OK));
            }
            let _ = writeln!(
                std::io::stderr(),
                "error: cannot write the output: {}",
                msg.trim_start_matches("failed printing to stdout: ")
            );
            std::process::exit(i32::from(crate::exit::INFRA_ERROR));
        }
        if msg.starts_with("failed printing to stderr") {
            std::process::exit(i32::from(crate::exit::INFRA_ERROR));
        }
        default(info);
    }));
}
