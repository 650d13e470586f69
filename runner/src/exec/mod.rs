//! Running a plan: worker processes, scheduling, the result store, progress.
//!
//! - `options.rs` — concurrency, retries, failure limits, time limits;
//! - `child.rs` — one worker process in its own process group, ended cleanly;
//! - `launch_error.rs` — why a worker could not be started or followed;
//! - `executor/` — where attempts run: local processes or Slurm batch jobs;
//! - `scheduler.rs` — the job state machines and the loop that drives them;
//! - `ready.rs` — dependency counts: which jobs may start;
//! - `signals.rs` — SIGINT/SIGTERM as a cancellation level;
//! - `slots.rs` — how many jobs run at once on the CPU and on each GPU;
//! - `worker_argv.rs` — the worker's command line for one attempt;
//! - `verdict.rs` — what an attempt's ending means;
//! - `store.rs` — `results.jsonl`, appended as jobs finish, read by `--resume`;
//! - `run_dir.rs` — run directories: unique, locked, tied to their spec, one run each;
//! - `evidence.rs` — what a judged job cites brought under the run directory, paths relative;
//! - `progress.rs` — live bar or plain lines;
//! - `console.rs` — lines to stdout/stderr that never fail the run when the reader goes away;
//! - `meta.rs` — what the run was (spec hash, host, commit, backend).

pub mod child;
pub mod console;
pub mod evidence;
pub mod executor;
pub mod launch_error;
pub mod meta;
pub mod options;
pub mod progress;
pub mod ready;
pub mod run_dir;
pub mod scheduler;
pub mod signals;
pub mod slots;
pub mod store;
pub mod verdict;
mod worker_argv;

pub use options::{Memory, RunOptions, Timeouts};
pub use scheduler::{execute, Execution};

/// Drive a future on a current-thread runtime: worker processes are spawned from this one
/// thread, which their parent-death signal is tied to.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
        .block_on(f)
}
