//! The `meshparity` binary: parse arguments, run the command, exit with its code.

mod cli;
mod engines;
mod exit;
mod output;

fn main() -> std::process::ExitCode {
    output::guard();
    cli::main()
}
