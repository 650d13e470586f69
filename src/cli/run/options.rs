//! How a run executes, from its command line: slots, memory, directories, shrinking, colour.

use std::path::{Path, PathBuf};
use std::time::Duration;

use meshparity_runner::exec::executor::ExecutorKind;
use meshparity_runner::exec::run_dir::RunDir;
use meshparity_runner::exec::{self, RunOptions, Timeouts};

use super::Args;

/// What the executor runs with, from the command line and the claimed run directory.
pub(super) fn options(
    args: &Args,
    (run_dir, output): (&RunDir, &Path),
    exe: PathBuf,
    executor: ExecutorKind,
    timeouts: Timeouts,
    (tries, basis, spec_copy): (
        Option<PathBuf>,
        meshparity_runner::fingerprint::Basis,
        Option<PathBuf>,
    ),
) -> RunOptions {
    // On Slurm the cluster schedules: what is in flight is bounded by `max_pending`, not by
    // this machine's cores or GPUs (at `-j` = cores, a two-core login node kept two CPUs' worth
    // of jobs on the whole cluster, one 8-rank job at a time).
    let cores = || std::thread::available_parallelism().map_or(1, |n| n.get());
    let (slots, gpu_slots) = match &executor {
        ExecutorKind::Slurm(c) => (args.jobs.unwrap_or(c.max_pending), c.max_pending),
        ExecutorKind::Local => (args.jobs.unwrap_or_else(cores), args.gpu_slots),
    };
    // On Slurm each job gets a node's memory of its own; here they share this machine's.
    let memory = matches!(executor, ExecutorKind::Local)
        .then(memory)
        .flatten();
    RunOptions {
        exe,
        spec: absolute(&args.spec),
        run_dir: absolute(&run_dir.path),
        cache_dir: absolute(&output.join("cache")),
        slots: slots.max(1),
        gpu_slots: gpu_slots.max(1),
        device: args.select.device,
        retries: args.retries,
        max_fail: if args.fail_fast {
            Some(1)
        } else {
            args.max_fail.map(|n| n as usize)
        },
        timeouts,
        grace: Duration::from_secs_f64(args.grace),
        no_cache: args.no_cache,
        keep_artifacts: args.keep_artifacts,
        shrink: shrink_policy(args.shrink, args.no_shrink),
        tries,
        executor,
        no_skip: args.no_skip,
        lines: exec::progress::LineStyle {
            color: args.color.on(),
            verbose: args.verbose,
        },
        basis,
        spec_copy,
        memory,
    }
}

/// The host memory the built-in engine's jobs share, and each one's estimate
/// (`meshparity_backends::memory`): what keeps two large 8-rank jobs from running at once on a
/// machine that holds one.
fn memory() -> Option<exec::Memory> {
    let room = meshparity_backends::memory::available()?;
    Some(exec::Memory {
        room: room.bytes,
        estimate: |job| {
            meshparity_backends::memory::estimate(
                &job.model_config,
                job.mesh_config.as_ref(),
                &job.training,
            )
        },
    })
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}

/// `--color`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum Color {
    Auto,
    Always,
    Never,
}

impl Color {
    /// Whether lines are coloured: `auto` on a terminal without `NO_COLOR` (no-color.org).
    pub(super) fn on(self) -> bool {
        match self {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => {
                std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::io::IsTerminal::is_terminal(&std::io::stderr())
            }
        }
    }
}

/// `--shrink[=S]`: every failure within S seconds; otherwise `--no-shrink`: none; neither: the
/// first of each kind within the default budget.
pub(super) fn shrink_policy(
    seconds: Option<f64>,
    none: bool,
) -> Option<meshparity_runner::shrink::policy::Policy> {
    use meshparity_runner::shrink::policy::Policy;
    match (seconds, none) {
        (Some(seconds), _) => Some(Policy {
            seconds,
            every: true,
        }),
        (None, true) => None,
        (None, false) => Some(Policy::default()),
    }
}
