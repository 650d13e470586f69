//! The `meshparity` binary: parse arguments, run the command, exit with its code.

mod alloc;
mod cli;
mod engines;
mod exit;
mod output;

fn main() -> std::process::ExitCode {
    alloc::keep_freed_memory();
    output::guard();
    cli::main()
}
