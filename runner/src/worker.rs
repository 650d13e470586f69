//! Worker mode: run one job of a spec in this process and write its result file.
//!
//! This is the unit the runner launches as a child process (and a cluster executor will launch
//! on a node later): everything it needs is on its command line — spec path, job id, output
//! directory, cache directory — and everything it found is in `result.json` in the output
//! directory. Exit status: 0 passed, 1 failed, 2 could not run the job.

use std::path::{Path, PathBuf};

use meshparity_engine::finding::Artifacts;
use meshparity_engine::{CheckError, Engine, EngineError, Finding, Judge, JudgeError, RunRequest};
use meshparity_reports::Status;
use meshparity_specs::{Device, Level, Limits};
use petgraph::graph::NodeIndex;
use serde::{Deserialize, Serialize};

use crate::engines::{Engines, Target};
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
    #[serde(default, deserialize_with = "Finding::lenient")]
    pub detail: Option<Finding>,
    /// The device the job computed on, as its engine describes it.
    #[serde(default)]
    pub adapter: String,
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
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("the spec does not load: {0}")]
    Spec(String),
    #[error("job {0} is not in this spec's plan (was the spec edited since the run started?)")]
    UnknownJob(JobId),
    #[error("artifacts of `{job}` are missing at {dir}: run that job first")]
    MissingReference { job: String, dir: String },
    #[error("{0}")]
    Engine(String),
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
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    if let Ok(exe) = std::env::current_exe().and_then(std::fs::metadata) {
        h.update(&exe.len().to_le_bytes());
        if let Ok(t) = exe.modified() {
            h.update(format!("{t:?}").as_bytes());
        }
    }
    let kind = match job.kind {
        JobKind::Reference => "reference",
        _ => "run",
    };
    cache.join(format!("{kind}-{}", &h.finalize().to_hex()[..16]))
}

/// Run the job on the engine `engines` opens for it and write `result.json`.
pub fn run(args: &WorkerArgs, engines: &dyn Engines) -> Result<WorkerResult, WorkerError> {
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
    let target = Target {
        spec: &loaded.spec,
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
        baseline: loaded.spec.baseline().map(|v| v.name.value.clone()),
    };
    let mut result = match &job.kind {
        JobKind::Reference | JobKind::Train { .. } => ctx.artifacts()?,
        JobKind::Check { level } => ctx.check(*level)?,
        JobKind::Mutation { mutation, .. } => ctx.mutation(mutation)?,
    };
    result.adapter = adapter;
    let path = args.out.join(RESULT_FILE);
    let bytes = serde_json::to_vec_pretty(&result).expect("results serialize");
    meshparity_reports::write::atomic(&path, &bytes).map_err(io("writing", &path))?;
    Ok(result)
}

/// One job and what it runs on.
struct Context<'a> {
    plan: &'a Plan,
    node: NodeIndex,
    job: &'a Job,
    args: &'a WorkerArgs,
    engine: &'a dyn Engine,
    adapter: &'a str,
    /// The spec's baseline variant, if it has variants.
    baseline: Option<String>,
}

impl Context<'_> {
    fn request<'b>(&'b self, levels: &'b [Level], out: &'b Path) -> RunRequest<'b> {
        RunRequest {
            model: &self.job.model_config,
            training: &self.job.training,
            dtype: self.job.dtype,
            mesh: self.job.mesh_config.as_ref(),
            levels,
            mutation: None,
            reference: None,
            out,
        }
    }

    /// An engine run whose artifacts later jobs judge (the reference, or a mesh's training):
    /// written into the cache, reused while the engine, device and binary are the same.
    fn artifacts(&self) -> Result<WorkerResult, WorkerError> {
        let dir = artifact_dir(&self.args.cache, self.job, self.adapter);
        let done = dir.join(RESULT_FILE);
        if !self.args.no_cache
            && self.engine.cacheable()
            && done.exists()
            && recorded_adapter(&dir).as_deref() == Some(self.adapter)
        {
            return Ok(WorkerResult {
                status: Status::Passed,
                summary: format!("reused cached artifacts in {}", dir.display()),
                seconds: 0.0,
                cached: true,
                detail: Some(Finding::Artifacts(Artifacts {
                    artifacts: dir.display().to_string(),
                    collectives: 0,
                })),
                adapter: self.adapter.to_owned(),
            });
        }
        // Build beside the final place and rename, so a half-written run is never reused.
        let tmp = dir.with_extension(format!("partial-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let manifest = match &self.job.kind {
            // A variant's run has no world-size-1 reference: it is one.
            JobKind::Train { levels } if self.job.variant.is_some() => {
                self.engine.run(&self.request(levels, &tmp))?
            }
            JobKind::Train { levels } => {
                let reference = self.reference_dir()?;
                let req = RunRequest {
                    reference: Some(&reference),
                    ..self.request(levels, &tmp)
                };
                self.engine.run(&req)?
            }
            _ => self.engine.reference(&self.request(&[], &tmp))?,
        };
        let what = if self.job.kind == JobKind::Reference {
            "oracle artifacts"
        } else {
            "mesh artifacts"
        };
        let result = WorkerResult {
            status: Status::Passed,
            summary: format!(
                "{what} written ({} steps, {} artifacts)",
                manifest.steps,
                manifest.artifacts.len()
            ),
            seconds: manifest.seconds,
            cached: false,
            detail: Some(Finding::Artifacts(Artifacts {
                artifacts: dir.display().to_string(),
                collectives: manifest.collectives,
            })),
            adapter: self.adapter.to_owned(),
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

    /// Judge one level from the reference's and the mesh run's artifacts.
    fn check(&self, level: Level) -> Result<WorkerResult, WorkerError> {
        let reference = self.reference_dir()?;
        let train = self.train_dir()?;
        let limits = self.job.limits.clone().unwrap_or_default();
        let baseline2 = self.baseline_run(2)?;
        let judge = Judge {
            dtype: self.job.dtype,
            training: &self.job.training,
            reference: &reference,
            run: &train,
            out: &self.args.out,
            baseline2: baseline2.as_deref(),
        };
        let o = judge.level(level, &limits)?;
        Ok(WorkerResult::verdict(
            o.passed,
            o.summary(),
            o.seconds,
            Finding::Level(o),
        ))
    }

    /// Train the mesh with the bug injected and judge it at every level of its cell.
    fn mutation(&self, mutation: &str) -> Result<WorkerResult, WorkerError> {
        let reference = self.reference_dir()?;
        let levels = level_limits(self.plan, self.node);
        let names: Vec<Level> = levels.iter().map(|(l, _)| *l).collect();
        let run = self.args.out.join("run");
        let req = RunRequest {
            mutation: Some(mutation),
            reference: Some(&reference),
            ..self.request(&names, &run)
        };
        let checked =
            meshparity_engine::check(self.engine, &req, &levels, &reference, &self.args.out)?;
        let o = checked.mutation(mutation);
        Ok(WorkerResult::verdict(
            o.caught,
            o.summary(),
            o.seconds,
            Finding::Mutation(o),
        ))
    }

    /// What this job is judged against: the world-size-1 reference, or with variants the
    /// baseline's (first) run on the same mesh.
    fn reference_dir(&self) -> Result<PathBuf, WorkerError> {
        if self.job.variant.is_some() {
            let run = self.baseline_run(1)?;
            return Ok(run.expect("every variant job depends on the baseline's run"));
        }
        let job = dependency(self.plan, self.node, |j| j.kind == JobKind::Reference)
            .expect("every job after the reference depends on it");
        self.dir_of(job)
    }

    /// The baseline variant's `repeat`th run on this mesh, if this job depends on one.
    fn baseline_run(&self, repeat: u32) -> Result<Option<PathBuf>, WorkerError> {
        let Some(baseline) = self.args_baseline() else {
            return Ok(None);
        };
        let found = dependency(self.plan, self.node, |j| {
            matches!(j.kind, JobKind::Train { .. })
                && j.variant.as_deref() == Some(baseline)
                && j.repeat == repeat
        });
        found.map(|j| self.dir_of(j)).transpose()
    }

    fn args_baseline(&self) -> Option<&str> {
        self.job.variant.as_ref()?;
        self.baseline.as_deref()
    }

    fn train_dir(&self) -> Result<PathBuf, WorkerError> {
        let variant = self.job.variant.as_deref();
        let job = dependency(self.plan, self.node, |j| {
            matches!(j.kind, JobKind::Train { .. })
                && j.variant.as_deref() == variant
                && j.repeat == 1
        })
        .expect("every check depends on its mesh's training");
        self.dir_of(job)
    }

    /// The artifacts of `job`, which must come from the adapter this job runs on: a GPU mesh
    /// judged against a CPU oracle would measure the kernels, not the mesh.
    fn dir_of(&self, job: &Job) -> Result<PathBuf, WorkerError> {
        let dir = artifact_dir(&self.args.cache, job, self.adapter);
        let Some(found) = recorded_adapter(&dir) else {
            return Err(WorkerError::MissingReference {
                job: job.name.clone(),
                dir: dir.display().to_string(),
            });
        };
        if found != self.adapter {
            return Err(WorkerError::DeviceMismatch {
                dir: dir.display().to_string(),
                found,
                here: self.adapter.to_owned(),
            });
        }
        Ok(dir)
    }
}

/// The nearest job `node` depends on that `want` picks (walking up its chain of levels).
fn dependency(plan: &Plan, node: NodeIndex, want: impl Fn(&Job) -> bool) -> Option<&Job> {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        for d in plan.dependencies(n) {
            if want(&plan.graph[d]) {
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
