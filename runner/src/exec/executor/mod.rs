//! Where an attempt runs. The scheduler decides *what* runs and when; an [`Executor`] decides
//! *where*, and reports each attempt's end on a channel. The unit both executors launch is the
//! same worker command (`meshparity worker …`), so a job means the same thing everywhere.
//!
//! - `local.rs` — a child process group on this machine;
//! - `served.rs` — on this machine, a built-in engine's job in a worker that serves many (one
//!   process start, and on a GPU one device setup, for all of them);
//! - `slurm/` — a Slurm batch job: submitted with `sbatch`, watched with `squeue`/`sacct`,
//!   cancelled with `scancel`.

pub mod local;
pub mod served;
pub mod slurm;

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use super::child::Finished;
use crate::plan::{Job, JobKind};

/// One attempt to start.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The job's index in the run, and which attempt this is (1-based).
    pub index: usize,
    pub attempt: u32,
    /// The job's name and id, for the cluster's job name and messages.
    pub name: String,
    pub job_id: String,
    /// The worker's arguments (after the executable).
    pub args: Vec<String>,
    /// The attempt's directory: logs, result, the executor's own records.
    pub dir: PathBuf,
    pub timeout: Duration,
    /// CPUs and GPUs to ask a cluster for, as one task.
    pub cpus: usize,
    pub gpus: usize,
    /// Ranks of a program that launches its own (a command engine's): a cluster may give it one
    /// task per rank instead (`[executor] tasks = "per-rank"`, for `srun` inside the job).
    pub own_ranks: Option<usize>,
    /// Whether a worker that serves many jobs may run it ([`served`]); the local executor then
    /// does.
    pub served: bool,
}

/// An attempt's end.
#[derive(Debug)]
pub struct Done {
    pub index: usize,
    pub attempt: u32,
    pub finished: Finished,
}

/// Runs attempts somewhere and reports their ends on the channel it was made with.
pub trait Executor {
    /// Start `launch` (or queue it); its [`Done`] arrives later, exactly once.
    fn launch(&mut self, launch: Launch);

    /// The run stopped starting jobs (`--fail-fast`, `--max-fail`): a cluster executor cancels
    /// everything it submitted, queued or running, since allocations cost; the local executor
    /// lets running jobs finish. Each cancelled attempt ends cancelled (not run).
    fn withdraw_pending(&mut self) {}
}

/// Which executor a run uses.
#[derive(Clone, Debug, Default)]
pub enum ExecutorKind {
    #[default]
    Local,
    Slurm(slurm::SlurmConfig),
}

/// The executor `kind` names for the run in `run_dir`, reporting on `done`, cancelled through
/// `cancel` (1: end gracefully, 2: now).
pub fn open(
    kind: &ExecutorKind,
    exe: PathBuf,
    run_dir: PathBuf,
    grace: Duration,
    cancel: tokio::sync::watch::Receiver<u8>,
    done: UnboundedSender<Done>,
) -> Box<dyn Executor> {
    match kind {
        ExecutorKind::Local => Box::new(local::Local {
            served: served::Served::new(exe.clone(), run_dir, grace),
            exe,
            grace,
            cancel,
            done,
        }),
        ExecutorKind::Slurm(config) => {
            Box::new(slurm::Slurm::start(config.clone(), exe, cancel, done))
        }
    }
}

/// Whether `job` may run in a worker that serves many: any job of the built-in engine. On a GPU
/// the device's setup and kernel compilation were most of a job's time; on the CPU a job's own
/// process cost it a start, its binary's pages and its allocator's arenas faulted in again — the
/// quickstart spent half its CPU in the kernel that way (docs/performance.md). Each job still
/// computes on its own slots' threads (`worker/threads.rs`). A user's program is its own
/// process anyway, so its jobs keep a worker each. `MESHPARITY_SERVE=0` gives every job a
/// process of its own again (the bench's baseline, or a suspicion that jobs interfere).
pub fn served(job: &Job) -> bool {
    job.model_config.engine.is_none() && serving_on()
}

/// The environment switch [`served`] reads.
pub const SERVE_ENV: &str = "MESHPARITY_SERVE";

fn serving_on() -> bool {
    std::env::var(SERVE_ENV).map_or(true, |v| v != "0")
}

/// CPUs and GPUs a cluster job asks for: the built-in engine simulates every rank in one
/// process (its threads share its CPUs, one per four ranks, alone on them where a local job
/// shares the machine's cores with its neighbours); a user's program launches its own ranks,
/// one device each.
pub fn resources(job: &Job) -> (usize, usize, Option<usize>) {
    let ranks = job.world_size as usize;
    if matches!(job.kind, JobKind::Check { .. }) {
        return (1, 0, None);
    }
    let own = job.model_config.engine.is_some().then_some(ranks);
    match (own.is_some(), job.device.is_cpu()) {
        (true, true) => (ranks, 0, own),
        (true, false) => (1, ranks, own),
        (false, true) => (ranks.div_ceil(4).max(1), 0, None),
        (false, false) => (1, 1, None),
    }
}
