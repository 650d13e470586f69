//! Worker mode: run one job of a spec in this process and write its result file.
//!
//! This is the unit the runner launches as a child process (and a cluster executor will launch
//! on a node later): everything it needs is on its command line — spec path, job id, output
//! directory, cache directory — and everything it found is in `result.json` in the output
//! directory. Exit status: 0 passed, 1 failed, 2 could not run the job.

use std::path::{Path, PathBuf};

use meshparity_backends::Backend;
use meshparity_reports::Status;
use meshparity_specs::{Device, Level, Limits};
use petgraph::graph::NodeIndex;
use serde::{Deserialize, Serialize};

use crate::plan::{Job, JobId, JobKind, Plan};

/// The result file a worker leaves in its output directory.
pub const RESULT_FILE: &str = "result.json";

/// What a worker is asked to do.
#[derive(Clone, Debug)]
pub struct WorkerArgs {
    pub spec: PathBuf,
    pub job: JobId,
    pub out: PathBuf,
    /// Reference artifacts live here, one directory per content key.
    pub cache: PathBuf,
    pub no_cache: bool,
    /// 1 for the first try; retries count up.
    pub attempt: u32,
    /// `--device`, as the runner was given it: the plan is rebuilt the same way.
    pub device: Option<Device>,
}

/// What a worker found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerResult {
    pub status: Status,
    pub summary: String,
    pub seconds: f64,
    #[serde(default)]
    pub cached: bool,
    #[serde(default)]
    pub detail: serde_json::Value,
    /// The adapter the job computed on (see [`meshparity_backends::Adapter::label`]).
    #[serde(default)]
    pub adapter: String,
}

impl WorkerResult {
    /// A check's (or mutation's) verdict with the backend's findings as detail.
    fn verdict(passed: bool, summary: String, seconds: f64, detail: &impl Serialize) -> Self {
        Self {
            status: if passed {
                Status::Passed
            } else {
                Status::Failed
            },
            summary,
            seconds,
            cached: false,
            detail: serde_json::to_value(detail).unwrap_or_default(),
            adapter: String::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("the spec does not load: {0}")]
    Spec(String),
    #[error("job {0} is not in this spec's plan (was the spec edited since the run started?)")]
    UnknownJob(JobId),
    #[error("reference artifacts for `{job}` are missing at {dir}: run its reference job first")]
    MissingReference { job: String, dir: String },
    #[error("{0}")]
    Backend(#[from] meshparity_backends::levels::LevelError),
    #[error("{0}")]
    Device(#[from] meshparity_backends::DeviceError),
    #[error(
        "the reference artifacts in {dir} were computed on `{found}`, this job runs on `{here}`; \
         a comparison needs both on the same device (run with --no-cache to recompute them)"
    )]
    DeviceMismatch {
        dir: String,
        found: String,
        here: String,
    },
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

/// Where the reference artifacts of a reference job live: keyed by the job's identity (model
/// configuration, dtype, training settings, device), by the adapter that computes them and by
/// this binary, since another GPU or another build may give other bits.
pub fn reference_dir(cache: &Path, job: &Job, adapter: &str) -> PathBuf {
    let mut h = blake3::Hasher::new();
    h.update(job.id.to_string().as_bytes());
    h.update(adapter.as_bytes());
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    if let Ok(exe) = std::env::current_exe().and_then(std::fs::metadata) {
        h.update(&exe.len().to_le_bytes());
        if let Ok(t) = exe.modified() {
            h.update(format!("{t:?}").as_bytes());
        }
    }
    cache.join(format!("reference-{}", &h.finalize().to_hex()[..16]))
}

/// Run the job and write `result.json`.
pub fn run(args: &WorkerArgs) -> Result<WorkerResult, WorkerError> {
    crate::testing::inject(args)?;
    let mut loaded =
        meshparity_specs::load(&args.spec).map_err(|e| WorkerError::Spec(e.to_string()))?;
    if let Some(device) = args.device {
        loaded = loaded
            .with_device(device)
            .map_err(|e| WorkerError::Spec(e.to_string()))?;
    }
    let plan = Plan::build(&loaded.spec);
    let node = plan
        .node(args.job)
        .ok_or(WorkerError::UnknownJob(args.job))?;
    let job = &plan.graph[node];
    std::fs::create_dir_all(&args.out).map_err(io("creating", &args.out))?;
    let backend = Backend::open(job.device)?;
    let adapter = backend.describe().1;
    let mut result = match &job.kind {
        JobKind::Reference => reference(&backend, job, args)?,
        JobKind::Check { level } => {
            let refdir = reference_of(&plan, node, args, &adapter)?;
            let mesh = job.mesh_config.as_ref().expect("check jobs have a mesh");
            let limits = job.limits.clone().unwrap_or_default();
            let o = backend.check(
                &job.model_config,
                &job.training,
                job.dtype,
                mesh,
                *level,
                &limits,
                &refdir,
                &args.out,
            )?;
            WorkerResult::verdict(o.passed, o.summary(), o.seconds, &o)
        }
        JobKind::Mutation { mutation, .. } => {
            let refdir = reference_of(&plan, node, args, &adapter)?;
            let mesh = job.mesh_config.as_ref().expect("mutation jobs have a mesh");
            let levels = level_limits(&plan, node);
            let o = backend.mutation(
                &job.model_config,
                &job.training,
                job.dtype,
                mesh,
                mutation,
                &levels,
                &refdir,
                &args.out,
            )?;
            WorkerResult::verdict(o.caught, o.summary(), o.seconds, &o)
        }
    };
    result.adapter = adapter;
    let path = args.out.join(RESULT_FILE);
    let bytes = serde_json::to_vec_pretty(&result).expect("results serialize");
    meshparity_reports::write::atomic(&path, &bytes).map_err(io("writing", &path))?;
    Ok(result)
}

fn reference(backend: &Backend, job: &Job, args: &WorkerArgs) -> Result<WorkerResult, WorkerError> {
    let adapter = backend.describe().1;
    let dir = reference_dir(&args.cache, job, &adapter);
    let done = dir.join(RESULT_FILE);
    if !args.no_cache && done.exists() && recorded_adapter(&dir).as_deref() == Some(&adapter) {
        return Ok(WorkerResult {
            status: Status::Passed,
            summary: format!("reused cached oracle artifacts in {}", dir.display()),
            seconds: 0.0,
            cached: true,
            detail: serde_json::json!({ "artifacts": dir.display().to_string() }),
            adapter,
        });
    }
    // Build beside the final place and rename, so a half-written reference is never reused.
    let tmp = dir.with_extension(format!("partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let seconds = backend.reference(&job.model_config, &job.training, job.dtype, &tmp)?;
    let result = WorkerResult {
        status: Status::Passed,
        summary: format!(
            "oracle artifacts written ({} steps)",
            job.training.steps.max(job.training.oracle_steps)
        ),
        seconds,
        cached: false,
        detail: serde_json::json!({ "artifacts": dir.display().to_string() }),
        adapter,
    };
    let marker = tmp.join(RESULT_FILE);
    std::fs::write(
        &marker,
        serde_json::to_vec_pretty(&result).expect("results serialize"),
    )
    .map_err(io("writing", &marker))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir).map_err(io("renaming into", &dir))?;
    Ok(result)
}

/// The reference job a job depends on (walking up its chain of levels).
fn reference_job(plan: &Plan, node: NodeIndex) -> Option<&Job> {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        for d in plan.dependencies(n) {
            if plan.graph[d].kind == JobKind::Reference {
                return Some(&plan.graph[d]);
            }
            stack.push(d);
        }
    }
    None
}

/// The adapter a reference was computed on, from its marker file.
fn recorded_adapter(dir: &Path) -> Option<String> {
    let bytes = std::fs::read(dir.join(RESULT_FILE)).ok()?;
    let r: WorkerResult = serde_json::from_slice(&bytes).ok()?;
    Some(r.adapter)
}

/// The reference artifacts a check compares with, which must come from the adapter the check
/// runs on: a GPU mesh judged against a CPU oracle would measure the kernels, not the mesh.
fn reference_of(
    plan: &Plan,
    node: NodeIndex,
    args: &WorkerArgs,
    adapter: &str,
) -> Result<PathBuf, WorkerError> {
    let job = reference_job(plan, node).expect("every check depends on a reference");
    let dir = reference_dir(&args.cache, job, adapter);
    let Some(found) = recorded_adapter(&dir) else {
        return Err(WorkerError::MissingReference {
            job: job.name.clone(),
            dir: dir.display().to_string(),
        });
    };
    if found != adapter {
        return Err(WorkerError::DeviceMismatch {
            dir: dir.display().to_string(),
            found,
            here: adapter.to_owned(),
        });
    }
    Ok(dir)
}

/// The levels (with their limits) of the checks a mutation job follows.
fn level_limits(plan: &Plan, node: NodeIndex) -> Vec<(Level, Limits)> {
    let mut out = Vec::new();
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        for d in plan.dependencies(n) {
            let job = &plan.graph[d];
            if let (JobKind::Check { level }, Some(limits)) = (&job.kind, &job.limits) {
                out.push((*level, limits.clone()));
            }
            stack.push(d);
        }
    }
    out.reverse();
    out
}
