//! The `meshparity` binary: parse arguments, run the command, exit with its code.
//!
//! - `cli` — the commands and their arguments (one file a command);
//! - `engines` — the engines a spec names, opened for the runner (the built-in burn engine or
//!   a command engine);
//! - `output` — standard output that may go away (a closed pipe, a full disk): never a panic;
//! - `exit` — exit codes; `alloc` — the allocator, keeping freed memory for the next job.

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
