//! One job's work on its engine: an engine run whose artifacts later jobs judge (the
//! reference, a mesh's training, a variant's run), a level judged from two runs' files, or a
//! mutation trained and judged in one go.

use std::path::{Path, PathBuf};

use meshparity_engine::{files, Engine, RunRequest};
use meshparity_judge::finding::Artifacts;
use meshparity_judge::{Finding, Judge, Repro};
use meshparity_reports::Status;
use meshparity_specs::{Level, Limits};
use petgraph::graph::NodeIndex;

use super::{
    artifact_dir, io, recorded_adapter, WorkerArgs, WorkerError, WorkerResult, RESULT_FILE,
};
use crate::calibrate::sweep::locate_mutation;
use crate::plan::{Job, JobKind, Plan};
use crate::shrink::policy::Order;

/// One job and what it runs on.
pub(super) struct Context<'a> {
    pub plan: &'a Plan,
    pub node: NodeIndex,
    pub job: &'a Job,
    pub args: &'a WorkerArgs,
    pub engine: &'a dyn Engine,
    pub adapter: &'a str,
    /// The spec's baseline variant, if it has variants.
    pub baseline: Option<String>,
    /// The spec, where the job needed it loaded (a command engine's, a variant's).
    pub spec: Option<&'a meshparity_specs::Spec>,
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
            trace: false,
        }
    }

    /// An engine run whose artifacts later jobs judge (the reference, or a mesh's training):
    /// written into the cache, reused while the engine, device and binary are the same.
    pub fn artifacts(&self) -> Result<WorkerResult, WorkerError> {
        let dir = self.artifact_dir(self.job);
        let reusable = !self.args.no_cache && self.engine.cacheable();
        // Why a cache entry that exists is not reused, said in the job's summary.
        let mut damaged = None;
        if reusable && dir.join(RESULT_FILE).exists() {
            match self.reusable(&dir) {
                Ok(()) => return Ok(self.reused(&dir)),
                Err(why) => damaged = why,
            }
        }
        // Build beside the final place and rename, so a half-written run is never reused.
        let tmp = super::partial::dir_for(&dir);
        let _ = std::fs::remove_dir_all(&tmp);
        super::partial::begin(&self.args.out, &tmp);
        let manifest = match &self.job.kind {
            // A variant's run has no world-size-1 reference: it is one.
            JobKind::Train { levels } if self.job.variant.is_some() => {
                self.engine.run(&self.request(levels, &tmp))?
            }
            // Planned beside its reference (see the planner), it makes its own seed.
            JobKind::Train { levels } => {
                let reference = dependency(self.plan, self.node, |j| j.kind == JobKind::Reference)
                    .map(|job| self.dir_of(job))
                    .transpose()?;
                let req = RunRequest {
                    reference: reference.as_deref(),
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
        meshparity_engine::seal(&tmp)?;
        let recomputed = damaged
            .map(|why| format!("; the cache entry was damaged and is recomputed: {why}"))
            .unwrap_or_default();
        let result = WorkerResult {
            status: Status::Passed,
            summary: format!(
                "{what} written ({} steps, {} artifacts){recomputed}",
                manifest.steps,
                manifest.artifacts.len()
            ),
            seconds: manifest.seconds,
            cached: false,
            detail: Some(Finding::Artifacts(Artifacts {
                artifacts: dir.display().to_string(),
                collectives: manifest.collectives,
                activation_bytes: manifest.activation_bytes,
            })),
            adapter: self.adapter.to_owned(),
            shrink_seconds: 0.0,
        };
        let marker = tmp.join(RESULT_FILE);
        std::fs::write(
            &marker,
            serde_json::to_vec(&result).expect("results serialize"),
        )
        .map_err(io("writing", &marker))?;
        let published = publish(&tmp, &dir, reusable && damaged_free(&dir, self.adapter))?;
        super::partial::end(&self.args.out);
        if !published {
            // Another run published the same entry first, intact: judge that one, so every
            // job of both runs reads one set of files.
            return Ok(self.reused(&dir));
        }
        Ok(result)
    }

    /// Where `job`'s engine run keeps its artifacts: the shared cache when runs are reused,
    /// otherwise this run's own scratch directory.
    fn artifact_dir(&self, job: &Job) -> PathBuf {
        let root = if self.engine.cacheable() {
            &self.args.cache
        } else {
            &self.args.scratch
        };
        artifact_dir(root, job, self.adapter)
    }

    /// `Ok` when the entry in `dir` is complete, intact and from this device; otherwise why
    /// not (`None`: nothing worth saying, e.g. computed on another device).
    fn reusable(&self, dir: &Path) -> Result<(), Option<String>> {
        if recorded_adapter(dir).as_deref() != Some(self.adapter) {
            return Err(None);
        }
        meshparity_engine::verify(dir)
            .map(|_| ())
            .map_err(|e| Some(e.to_string()))
    }

    fn reused(&self, dir: &Path) -> WorkerResult {
        WorkerResult {
            status: Status::Passed,
            summary: format!("reused cached artifacts in {}", dir.display()),
            seconds: 0.0,
            cached: true,
            detail: Some(Finding::Artifacts(Artifacts {
                artifacts: dir.display().to_string(),
                collectives: 0,
                activation_bytes: None,
            })),
            adapter: self.adapter.to_owned(),
            shrink_seconds: 0.0,
        }
    }

    /// Shrink this job's failure `what` as `order` says: the outcome's `repro` and `repro_in`,
    /// and the seconds it took.
    fn shrink(
        &self,
        what: &super::repro::Failure<'_>,
        order: &Order,
    ) -> ((Option<Repro>, Option<String>), f64) {
        let shrinking = std::time::Instant::now();
        let shrunk = super::repro::shrink(
            self.engine,
            self.spec,
            self.job,
            &self.args.out,
            what,
            order,
        );
        (shrunk.into_parts(), shrinking.elapsed().as_secs_f64())
    }

    /// Judge one level from the reference's and the mesh run's artifacts.
    pub fn check(&self, level: Level) -> Result<WorkerResult, WorkerError> {
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
        let mut o = judge.level(level, &limits)?;
        let mut shrink_seconds = 0.0;
        // A vacuous level (a reference that does not train) has no divergence to localize.
        if !o.passed && self.job.variant.is_none() && !o.only_vacuous() {
            // A verdict already computed is kept whatever happens to its localization.
            match self.localize(level, &o) {
                Ok(l) => o.localization = l.map(|l| l.or_gate(Some(&o))),
                Err(e) => {
                    eprintln!("localizing the failure: {e}");
                    o.localization_failed = Some(e.to_string());
                }
            }
            if let Some(order) = &self.args.shrink {
                let site = o.localization.as_ref().and_then(|l| l.first.as_ref());
                let site = site.map(|s| s.site.clone());
                let what = super::repro::Failure {
                    level,
                    mutation: None,
                    limits: Some(&limits),
                    site: site.as_deref(),
                };
                ((o.repro, o.repro_in), shrink_seconds) = self.shrink(&what, order);
            }
        }
        Ok(WorkerResult {
            shrink_seconds,
            ..WorkerResult::verdict(o.passed, o.summary(), o.seconds, Finding::Level(o))
        })
    }

    /// Train the mesh with the bug injected and judge it at the levels of its cell, in stages
    /// of growing run length up to the first that catches it
    /// ([`meshparity_judge::check_until_caught`]): the job's verdict is the whole run's (the
    /// conformance suite holds engines to that), and most bugs are caught after one step.
    pub fn mutation(&self, mutation: &str) -> Result<WorkerResult, WorkerError> {
        let reference = self.reference_dir()?;
        let levels = level_limits(self.plan, self.node);
        let names: Vec<Level> = levels.iter().map(|(l, _)| *l).collect();
        let run = self.args.out.join("run");
        // Traced as it trains: a caught mutation is localized from the run that caught it
        // (a forward caught in the first stage from that forward), not from another run.
        let req = RunRequest {
            mutation: Some(mutation),
            reference: Some(&reference),
            trace: true,
            ..self.request(&names, &run)
        };
        let checked = meshparity_judge::check_until_caught(
            self.engine,
            &req,
            &levels,
            &reference,
            &self.args.out,
        )?;
        let mut o = checked.mutation(mutation);
        let trace = self.args.out.join("trace");
        let shared = self.shared_trace_dir(&reference);
        let traced = match &shared {
            // The reference run's own trace (the trace level's), where it wrote one.
            _ if reference.join(files::TRACE_INDEX).is_file() => {
                meshparity_judge::ReferenceTrace::made(reference.clone())
            }
            Some(dir) if dir.is_dir() => meshparity_judge::ReferenceTrace::made(dir.clone()),
            _ => meshparity_judge::ReferenceTrace::new(trace.join("reference")),
        };
        let found = locate_mutation(self.engine, &req, &o, &traced, &trace.join("run"));
        let found = found.unwrap_or_else(|e| {
            eprintln!("localizing the mutation: {e}");
            o.localization_failed = Some(e.to_string());
            None
        });
        if let Some(dir) = shared.filter(|d| !d.is_dir() && traced.is_made()) {
            // The first of the run's mutation jobs to trace the reference hands it to the rest;
            // a rename onto a directory another job published first fails, and this job's
            // copy stays its own.
            let _ = std::fs::rename(trace.join("reference"), dir);
        }
        if let Some(l) = found {
            o.localized(l, self.engine);
        }
        let order = self.args.shrink.as_ref().filter(|o| o.caught);
        let mut shrink_seconds = 0.0;
        if let (Some(order), Some(&level)) = (order, o.caught_by.first()) {
            let site = o.localization.as_ref().and_then(|l| l.first.as_ref());
            let site = site.map(|s| s.site.clone());
            let what = super::repro::Failure {
                level,
                mutation: Some(mutation),
                limits: None,
                site: site.as_deref(),
            };
            ((o.repro, o.repro_in), shrink_seconds) = self.shrink(&what, order);
        }
        Ok(WorkerResult {
            shrink_seconds,
            ..WorkerResult::verdict(o.caught, o.summary(), o.seconds, Finding::Mutation(o))
        })
    }

    /// Where this run's mutation jobs share the trace of their reference (`reference`, whose
    /// directory name is its content key; the trace's length is the reference's, whatever the
    /// mesh), in the run's scratch directory, so the reference is traced once per run instead
    /// of once per mutation. `None` when the directory has no name to key it by.
    fn shared_trace_dir(&self, reference: &Path) -> Option<PathBuf> {
        let name = reference.file_name()?.to_string_lossy();
        std::fs::create_dir_all(&self.args.scratch).ok()?;
        Some(
            self.args
                .scratch
                .join(format!("{}{name}", super::prune::SHARED_TRACE)),
        )
    }

    /// Where a failed level's mesh run first leaves the reference: the roundtrip level's
    /// checkpoint, or for training levels both runs traced again and compared site by site.
    fn localize(
        &self,
        level: Level,
        o: &meshparity_judge::Outcome,
    ) -> Result<Option<meshparity_judge::Localization>, WorkerError> {
        if level == Level::Roundtrip {
            return Ok(meshparity_judge::checkpoint_site(o));
        }
        // Inputs not the reference's: the difference precedes any computation to trace.
        if let Some(l) = meshparity_judge::inputs::site(o) {
            return Ok(Some(l));
        }
        let levels = [level];
        let dir = self.args.out.join("trace");
        let req = self.request(&levels, &dir);
        Ok(meshparity_judge::localize(self.engine, &req, &dir)?)
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
    /// judged against a CPU oracle would measure the kernels, not the mesh. Their content
    /// hashes are checked before anything reads them: all of them for an engine run (an
    /// engine may read any file of its reference), for a judge only those of the files its
    /// level reads, as the judge reads them ([`meshparity_engine::verify_file`]).
    fn dir_of(&self, job: &Job) -> Result<PathBuf, WorkerError> {
        let dir = self.artifact_dir(job);
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
        let checked = if matches!(self.job.kind, JobKind::Check { .. }) {
            meshparity_engine::sealed(&dir).map(|_| ())
        } else {
            meshparity_engine::verify(&dir).map(|_| ())
        };
        checked.map_err(|e| WorkerError::Damaged {
            job: job.name.clone(),
            why: e.to_string(),
        })?;
        Ok(dir)
    }
}

/// Whether `dir` holds an intact entry from `adapter` (which a concurrent run may have just
/// published).
fn damaged_free(dir: &Path, adapter: &str) -> bool {
    recorded_adapter(dir).as_deref() == Some(adapter) && meshparity_engine::verify(dir).is_ok()
}

/// Move the finished `tmp` to `dir`. Where `dir` exists, `keep_existing` keeps it (returns
/// `false`, `tmp` is dropped); otherwise the old entry is renamed aside first and removed only
/// after the new one is in place, so `dir` is never missing while another run reads it.
fn publish(tmp: &Path, dir: &Path, keep_existing: bool) -> Result<bool, WorkerError> {
    if keep_existing {
        let _ = std::fs::remove_dir_all(tmp);
        return Ok(false);
    }
    if std::fs::rename(tmp, dir).is_ok() {
        return Ok(true);
    }
    let stale = meshparity_files::temp_sibling(dir);
    std::fs::rename(dir, &stale).map_err(io("moving aside", dir))?;
    std::fs::rename(tmp, dir).map_err(io("renaming into", dir))?;
    let _ = std::fs::remove_dir_all(&stale);
    Ok(true)
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
