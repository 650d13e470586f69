//! `meshparity completions SHELL` and `meshparity man`: what a shell and `man` need, generated
//! from the same command definition as `--help`, so they cannot fall behind it.

use std::io::Write;

use clap::CommandFactory;

use crate::exit;

#[derive(clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

pub fn completions(args: &CompletionArgs) -> u8 {
    let mut cmd = super::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "meshparity", &mut out);
    print(&out)
}

pub fn man() -> u8 {
    let mut out = Vec::new();
    if let Err(e) = clap_mangen::Man::new(super::Cli::command()).render(&mut out) {
        eprintln!("error: rendering the man page: {e}");
        return exit::INFRA_ERROR;
    }
    print(&out)
}

/// Write to stdout; a closed pipe (`| head`) is not an error worth a message.
fn print(bytes: &[u8]) -> u8 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => exit::OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            eprintln!("error: writing: {e}");
            exit::INFRA_ERROR
        }
    }
}
