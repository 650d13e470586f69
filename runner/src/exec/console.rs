//! Lines for the person watching a run, written so that their going away never costs the run.
//!
//! `meshparity run … 2>&1 | head -c 10` closes the pipe after ten bytes. `eprintln!` then
//! panics, and the run died with exit 3, no results.json and no reports, though every job had
//! been computed. Here a write that fails points that stream at `/dev/null` and the run goes on:
//! its results and reports are on disk, and its exit code is the run's.

use std::fmt;
use std::io::Write;

/// Write `args` to stderr, as is.
pub fn stderr(args: fmt::Arguments<'_>) {
    let failed = std::io::stderr().lock().write_fmt(args).is_err();
    if failed {
        silence(libc::STDERR_FILENO);
    }
}

/// Write `args` to stdout, as is.
pub fn stdout(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let failed = out.write_fmt(args).and_then(|_| out.flush()).is_err();
    if failed {
        silence(libc::STDOUT_FILENO);
    }
}

/// Point `fd` at `/dev/null`, so later writes (and the flush at exit) succeed unseen.
fn silence(fd: libc::c_int) {
    // SAFETY: open and dup2 on a NUL-terminated path and plain descriptors; no memory of ours
    // is touched.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, fd);
            libc::close(null);
        }
    }
}

/// `eprintln!` that never fails the run ([`stderr`]), its text shown escaped: what it says may
/// quote a program's output or a file's names ([`meshparity_files::text`]).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::exec::console::stderr(format_args!(
            "{}\n",
            ::meshparity_files::text::escaped(&format!($($arg)*))
        ))
    };
}
