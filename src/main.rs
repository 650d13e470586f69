//! The `meshparity` binary: parse arguments, run the command, exit with its code.

mod cli;
mod engines;
mod exit;

fn main() -> std::process::ExitCode {
    cli::main()
}
