//! Worker mode: run one job of a spec in this process and write its result file.
//!
//! This is the unit the runner launches as a child process (and a cluster executor will launch
//! on a node later): everything it needs is on its command line — spec path, job id, output
//! directory, cache directory — and everything it found is in `result.json` in the output
//! directory. Exit status: 0 passed, 1 failed, 2 could not run the job.
//!
//! - `context.rs` — the job's work on its engine (engine runs, judging, mutations);
//! - `prune.rs` — what a judged job keeps on disk (the files its result cites);
//! - `dedupe.rs` — identical kept files stored once;
//! - `keep.rs` — what a caught mutation keeps: one failed comparison's files, the rows its
//!   reports show;
//! - `partial.rs` — a half-built artifact directory named, so the runner removes it;
//! - `repro.rs` — a caught mutation's smallest repro (`--shrink`);
//! - `threads.rs` — the job's compute pool, sized to its slots;
//! - `trim.rs` — a kept trace cut to the sites its comparison names.

mod context;
mod dedupe;
#[cfg(feature = "test-faults")]
mod faults;
mod keep;
mod pages;
mod partial;
mod prune;
mod repro;
mod threads;
mod trim;

use std::path::{Path, PathBuf};

use meshparity_engine::EngineError;
use meshparity_judge::{CheckError, Finding, JudgeError};
use meshparity_reports::Status;
use meshparity_specs::Device;
use serde::{Deserialize, Serialize};

use context::Context;
pub use dedupe::drop_unlinked;
pub use partial::clean_up as clean_up_partial;
pub(crate) use prune::cited;
pub use prune::drop_shared_traces;

use crate::engines::{Engines, Target};
use crate::plan::job_file::JobFile;
use crate::plan::{Job, JobId, JobKind, Plan};

/// The runner's pid, given to each worker it starts: the worker dies with it
/// ([`meshparity_procs::guard`]).
pub const PARENT_ENV: &str = "MESHPARITY_PARENT_PID";

/// The result file a worker leaves in its output directory.
pub const RESULT_FILE: &str = "result.json";

/// The run's store of kept files' bytes, in its scratch directory ([`dedupe`]).
pub const BLOBS: &str = "blobs";

/// What a worker is asked to do.
#[derive(Clone, Debug)]
pub struct WorkerArgs {
    pub spec: PathBuf,
    pub job: JobId,
    /// The job and its dependencies as the runner planned them (`job.json`); without it the
    /// worker plans the spec itself to find `job`.
    pub job_file: Option<PathBuf>,
    pub out: PathBuf,
    /// Reference artifacts live here, one directory per content key.
    pub cache: PathBuf,
    /// Artifacts of engines that are not [`Engine::cacheable`] live here instead, so a run
    /// never judges (or replaces) another run's outputs.
    ///
    /// [`Engine::cacheable`]: meshparity_engine::Engine::cacheable
    pub scratch: PathBuf,
    pub no_cache: bool,
    /// Keep every file a judged job wrote; otherwise only those its result cites stay
    /// ([`prune`]).
    pub keep_artifacts: bool,
    /// How a failing job shrinks to its smallest repro (`None`: it does not).
    pub shrink: Option<crate::shrink::policy::Order>,
    /// 1 for the first try; retries count up.
    pub attempt: u32,
    /// `--device`, as the runner was given it: the plan is rebuilt the same way.
    pub device: Option<Device>,
    /// The CPU slots the runner gave this job ([`threads`]).
    pub threads: Option<usize>,
}

/// What a worker found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerResult {
    pub status: Status,
    pub summary: String,
    pub seconds: f64,
    #[serde(default)]
    pub cached: bool,
    #[serde(default, deserialize_with = "Finding::lenient")]
    pub detail: Option<Finding>,
    /// The device the job computed on, as its engine describes it.
    #[serde(default)]
    pub adapter: String,
    /// Of the job's time, what shrinking its failure took (reported apart: the job's own time
    /// is its check's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shrink_seconds: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl WorkerResult {
    /// A check's (or mutation's) verdict with the engine's findings as detail.
    fn verdict(passed: bool, summary: String, seconds: f64, detail: Finding) -> Self {
        Self {
            status: if passed {
                Status::Passed
            } else {
                Status::Failed
            },
            summary,
            seconds,
            cached: false,
            detail: Some(detail),
            adapter: String::new(),
            shrink_seconds: 0.0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("the spec does not load: {0}")]
    Spec(#[from] meshparity_specs::SpecError),
    #[error(transparent)]
    JobFile(#[from] crate::plan::job_file::JobFileError),
    #[error("job {0} is not in this spec's plan (was the spec edited since the run started?)")]
    UnknownJob(JobId),
    #[error("artifacts of `{job}` are missing at {dir}: run that job first")]
    MissingReference { job: String, dir: String },
    #[error(transparent)]
    Engine(#[from] crate::engines::OpenError),
    #[error(transparent)]
    Run(#[from] EngineError),
    #[error(transparent)]
    Judge(#[from] JudgeError),
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error(
        "the reference artifacts in {dir} were computed on `{found}`, this job runs on `{here}`; \
         a comparison needs both on the same device (run with --no-cache to recompute them)"
    )]
    DeviceMismatch {
        dir: String,
        found: String,
        here: String,
    },
    #[error("the artifacts of `{job}` cannot be trusted: {why} (run again: the job that writes them recomputes a damaged entry)")]
    Damaged { job: String, why: String },
    #[error(transparent)]
    Artifact(#[from] meshparity_engine::ArtifactError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> WorkerError + 'a {
    move |source| WorkerError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// Where the artifacts of an engine-run job (reference or training) live: keyed by the job's
/// identity (model configuration, mesh, dtype, training settings, device), by the adapter that
/// computes them and by this binary, since another GPU or another build may give other bits.
pub fn artifact_dir(cache: &Path, job: &Job, adapter: &str) -> PathBuf {
    let mut h = blake3::Hasher::new();
    h.update(job.id.to_string().as_bytes());
    h.update(adapter.as_bytes());
    h.update(crate::fingerprint::build_identity().as_bytes());
    let kind = match job.kind {
        JobKind::Reference => "reference",
        _ => "run",
    };
    cache.join(format!("{kind}-{}", &h.finalize().to_hex()[..16]))
}

/// Run the job on the engine `engines` opens for it and write `result.json`, computing on as
/// many threads as the runner gave it ([`threads`]).
pub fn run(args: &WorkerArgs, engines: &dyn Engines) -> Result<WorkerResult, WorkerError> {
    threads::within(args.threads, || run_sized(args, engines))
}

fn run_sized(args: &WorkerArgs, engines: &dyn Engines) -> Result<WorkerResult, WorkerError> {
    let (plan, node, mut loaded) = match &args.job_file {
        // What the runner planned, without re-planning the spec.
        Some(path) => {
            let (plan, node) = JobFile::read(path)?.plan();
            (plan, node, None)
        }
        None => {
            let loaded = load(args)?;
            let plan = Plan::build(&loaded.spec);
            let node = plan
                .node(args.job)
                .ok_or(WorkerError::UnknownJob(args.job))?;
            (plan, node, Some(loaded))
        }
    };
    let job = &plan.graph[node];
    if job.id != args.job {
        return Err(WorkerError::UnknownJob(args.job));
    }
    #[cfg(feature = "test-faults")]
    if let Some(noop) = faults::inject(args, &job.name)? {
        return Ok(noop);
    }
    // A user's program would inherit the setting; every other job computes in this process.
    if job.model_config.engine.is_none() || matches!(job.kind, JobKind::Check { .. }) {
        pages::base_pages_only();
    }
    // A user's program (its `[engines]`, its `[variants]`) is described by the spec itself.
    if loaded.is_none() && (job.model_config.engine.is_some() || job.variant.is_some()) {
        loaded = Some(load(args)?);
    }
    std::fs::create_dir_all(&args.out).map_err(io("creating", &args.out))?;
    // Everything this job writes is flushed to disk once, before its result (below), instead
    // of file by file.
    meshparity_engine::checkpoint::sync_to_disk(false);
    let spec = loaded.as_ref().map(|l| &l.spec);
    let target = Target {
        spec,
        model: &job.model_config,
        device: job.device,
        variant: job.variant.as_deref(),
        cache: &args.cache,
    };
    let engine = engines.open(&target).map_err(WorkerError::Engine)?;
    let adapter = engine.describe().device;
    let ctx = Context {
        plan: &plan,
        node,
        job,
        args,
        engine: engine.as_ref(),
        adapter: &adapter,
        baseline: spec
            .and_then(|s| s.baseline())
            .map(|v| v.name.value.clone()),
        spec,
    };
    let mut result = match &job.kind {
        JobKind::Reference | JobKind::Train { .. } => ctx.artifacts()?,
        JobKind::Check { level } => ctx.check(*level)?,
        JobKind::Mutation { mutation, .. } => ctx.mutation(mutation)?,
    };
    result.adapter = adapter;
    if matches!(job.kind, JobKind::Check { .. } | JobKind::Mutation { .. }) && !args.keep_artifacts
    {
        keep::choose(&args.out, result.detail.as_mut());
        // Its summary quoted the first failure's compare line, which may have lost its files.
        if let Some(Finding::Mutation(m)) = &result.detail {
            result.summary = m.summary();
        }
        keep::shown_rows(result.detail.as_mut());
        prune::prune(&args.out, result.detail.as_ref());
        trim::trim(&args.out, result.detail.as_ref());
        dedupe::dedupe(&args.out, &args.scratch.join(BLOBS));
    }
    let made = match &result.detail {
        Some(Finding::Artifacts(a)) => Some(PathBuf::from(&a.artifacts)),
        _ => None,
    };
    if let Some(dir) = &made {
        dedupe::dedupe_run(dir, &args.scratch, &args.scratch.join(BLOBS));
    }
    // The artifacts and records the result cites reach the disk before it exists: the job's
    // own directory and the cache entry it made, not the filesystem (other jobs' scratch).
    let trees: Vec<&Path> = std::iter::once(args.out.as_path())
        .chain(made.as_deref())
        .collect();
    meshparity_files::flush_trees(&trees).map_err(io("flushing to disk", &args.out))?;
    let path = args.out.join(RESULT_FILE);
    let bytes = serde_json::to_vec(&result).expect("results serialize");
    // Read by the runner a moment later; what must survive a crash is its record in
    // results.jsonl (flushed there), and a cache entry is verified by its hashes anyway.
    meshparity_files::write_replace(&path, &bytes).map_err(io("writing", &path))?;
    Ok(result)
}

fn load(args: &WorkerArgs) -> Result<meshparity_specs::Loaded, WorkerError> {
    let mut loaded = meshparity_specs::load(&args.spec)?;
    if let Some(device) = args.device {
        loaded = loaded.with_device(device)?;
    }
    Ok(loaded)
}

/// The adapter a reference was computed on, from its marker file.
fn recorded_adapter(dir: &Path) -> Option<String> {
    let bytes = std::fs::read(dir.join(RESULT_FILE)).ok()?;
    let r: WorkerResult = serde_json::from_slice(&bytes).ok()?;
    Some(r.adapter)
}
