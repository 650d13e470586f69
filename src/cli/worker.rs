//! `meshparity worker` (hidden): run one job in this process; the runner's child processes.

use std::path::PathBuf;

use meshparity_reports::Status;
use meshparity_runner::worker::{self, WorkerArgs};
use meshparity_runner::JobId;

use crate::exit;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    spec: PathBuf,
    /// Job id (16 hex digits, as `meshparity plan --format json` lists).
    #[arg(long)]
    job: String,
    /// The job as the runner planned it (`job.json`): the worker then skips planning the spec.
    #[arg(long)]
    job_file: Option<PathBuf>,
    /// Directory for the job's artifacts and `result.json`.
    #[arg(long)]
    out: PathBuf,
    /// Cache of reference artifacts.
    #[arg(long)]
    cache: PathBuf,
    /// Where the artifacts of engines whose runs are never reused live (the run directory's
    /// `artifacts/`): a command engine's outputs stay with the run that made them.
    #[arg(long)]
    scratch: Option<PathBuf>,
    #[arg(long)]
    no_cache: bool,
    /// Keep every file the job wrote (traces, a mutated run's shards), not only those its
    /// result cites.
    #[arg(long)]
    keep_artifacts: bool,
    /// Seconds to spend shrinking a failure to its smallest repro.
    #[arg(long, value_name = "SECONDS")]
    shrink: Option<f64>,
    /// With --shrink: shrink only if this job is the first to claim its kind of failure here
    /// (the runner's default; without it every failure shrinks).
    #[arg(long, value_name = "DIR", requires = "shrink")]
    shrink_claims: Option<PathBuf>,
    /// With --shrink: caught mutations shrink too (the runner's `--shrink`); without it only
    /// failed checks do.
    #[arg(long, requires = "shrink")]
    shrink_caught: bool,
    /// With --shrink: make the search's tries here (the runner's directory in memory) instead
    /// of in the job's directory.
    #[arg(long, value_name = "DIR", requires = "shrink")]
    shrink_tries: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    attempt: u32,
    /// Every job on this device (the runner's `--device`).
    #[arg(long)]
    device: Option<meshparity_specs::Device>,
    /// Compute threads: the CPU slots the runner gave this job (default: every core, or
    /// RAYON_NUM_THREADS, which wins when set).
    #[arg(long)]
    threads: Option<usize>,
    /// Seconds a program gets to end after SIGTERM reaches the worker (the runner's
    /// `--grace`) before the worker kills what is left of it.
    #[arg(long, default_value_t = 5.0)]
    grace: f64,
}

pub fn run(args: &Args) -> u8 {
    set_up(args.grace);
    // One job per process: its heap is the job's, so its memory figure is measured.
    meshparity_engine::heap::enable();
    job(args)
}

/// What a worker process does once, before its first job: it dies with the runner (ending what
/// it started, `grace` seconds after SIGTERM), and a panic ends with one line the runner quotes.
pub fn set_up(grace: f64) {
    let parent = std::env::var(worker::PARENT_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok());
    let grace = std::time::Duration::try_from_secs_f64(grace).unwrap_or_default();
    meshparity_procs::guard(parent, grace);
    // After the default report (and any backtrace), one line the runner can quote.
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        eprintln!("error: the job panicked{at}: {msg}");
    }));
}

/// Run the job `args` names; the worker's exit code for it.
pub fn job(args: &Args) -> u8 {
    let Some(job) = JobId::parse(&args.job) else {
        eprintln!("error: `{}` is not a job id (16 hex digits)", args.job);
        return exit::SPEC_ERROR;
    };
    let wa = WorkerArgs {
        spec: args.spec.clone(),
        job,
        job_file: args.job_file.clone(),
        out: args.out.clone(),
        scratch: args.scratch.clone().unwrap_or_else(|| args.cache.clone()),
        cache: args.cache.clone(),
        no_cache: args.no_cache,
        keep_artifacts: args.keep_artifacts,
        shrink: args
            .shrink
            .map(|seconds| meshparity_runner::shrink::policy::Order {
                seconds,
                claims: args.shrink_claims.clone(),
                tries: args.shrink_tries.clone(),
                caught: args.shrink_caught,
            }),
        attempt: args.attempt,
        device: args.device,
        threads: args.threads,
    };
    match worker::run(&wa, &crate::engines::Builtin) {
        Ok(r) => {
            println!("{}: {}", r.status.as_str(), r.summary);
            if r.status == Status::Passed {
                exit::OK
            } else {
                exit::CHECK_FAILED
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::SPEC_ERROR
        }
    }
}
