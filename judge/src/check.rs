//! A mesh run judged at its levels in one go: what calibration sweeps, mutation jobs and the
//! conformance suite do per mesh. (The runner splits the same work into one engine-run job and
//! one judge job per level, so that each level is its own test case.)

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use meshparity_specs::{Level, Limits};

use crate::cause::Axes;
use crate::judge::{Judge, JudgeError};
use crate::locate::{locate, Localization, Site};
use crate::mutation::MutationOutcome;
use crate::outcome::Outcome;
use meshparity_engine::artifact::Manifest;
use meshparity_engine::engine::{Engine, EngineError, RunRequest};

/// Why a mesh could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Judge(#[from] JudgeError),
}

/// A mesh run and what its levels found.
#[derive(Clone, Debug)]
pub struct Checked {
    pub manifest: Manifest,
    /// One outcome per level, in the order asked.
    pub outcomes: Vec<Outcome>,
    pub seconds: f64,
}

impl Checked {
    /// The verdict on this run as a mutation job: caught if some level failed.
    pub fn mutation(self, name: &str) -> MutationOutcome {
        MutationOutcome::judged(name, &self.manifest, self.outcomes, self.seconds)
    }
}

/// Run `req` (its `out` is the run's directory; each level is judged into `judged/<level>`
/// beside it) and judge it at `levels` against the reference in `reference`.
pub fn check(
    engine: &dyn Engine,
    req: &RunRequest<'_>,
    levels: &[(Level, Limits)],
    reference: &Path,
    judged: &Path,
) -> Result<Checked, CheckError> {
    let start = Instant::now();
    let manifest = engine.run(req)?;
    let mut outcomes = Vec::new();
    for (level, limits) in levels {
        let out = judged.join(level.as_str());
        let judge = Judge {
            dtype: req.dtype,
            training: req.training,
            reference,
            run: req.out,
            out: &out,
            baseline2: None,
        };
        outcomes.push(judge.level(*level, limits)?);
    }
    Ok(Checked {
        manifest,
        outcomes,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Where `req`'s run first leaves the reference: both traced by `engine` into `dir`
/// (`reference/`, `run/`) and compared site by site. `None` when the engine cannot trace.
pub fn localize(
    engine: &dyn Engine,
    req: &RunRequest<'_>,
    dir: &Path,
) -> Result<Option<Localization>, EngineError> {
    let reference = ReferenceTrace::new(dir.join("reference"));
    reference.localize(engine, req, &dir.join("run"))
}

/// The reference's trace, made once on first use for every mesh and mutation localized against
/// it: a sweep that localizes hundreds of mutations of one reference traces it once.
pub struct ReferenceTrace {
    dir: PathBuf,
    /// Whether the engine traced (`false`: it cannot), once it has been asked.
    traced: OnceLock<bool>,
}

impl ReferenceTrace {
    /// A trace to be made in `dir` on first use.
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            traced: OnceLock::new(),
        }
    }

    /// A trace another job already made, complete, in `dir` (the runner's jobs share one per
    /// reference: published by an atomic rename, so a directory that exists is whole).
    pub fn made(dir: PathBuf) -> Self {
        Self {
            dir,
            traced: OnceLock::from(true),
        }
    }

    /// Whether the trace is in its directory: made here or found made.
    pub fn is_made(&self) -> bool {
        self.traced.get() == Some(&true)
    }

    /// Trace `req`'s run into `run` and compare it site by site with the reference (traced
    /// first if it has not been). `None` when the engine cannot trace.
    pub fn localize(
        &self,
        engine: &dyn Engine,
        req: &RunRequest<'_>,
        run: &Path,
    ) -> Result<Option<Localization>, EngineError> {
        if !self.ensure(engine, req)? {
            return Ok(None);
        }
        // A run whose levels read only the first step's forward (a failure the forward or
        // routing level found) is traced that far first, where an engine runs to the asked
        // length: a forward's trace is the start of the whole one, bit for bit, so a
        // divergence found in it is the whole trace's first. Only where none is found (a
        // reported metric alone differs) are two whole steps traced, to say so of every
        // value. Same localization, a fraction of the arithmetic.
        if engine.runs_to_length() && req.mesh.is_some() && !req.length().backward {
            let found = localize_against(engine, req, &self.dir, run)?;
            if found.as_ref().is_none_or(|l| l.first.is_some()) {
                return Ok(found);
            }
            let _ = std::fs::remove_dir_all(run);
            let whole = [Level::Trace];
            let req = RunRequest {
                levels: &whole,
                ..*req
            };
            return localize_against(engine, &req, &self.dir, run);
        }
        localize_against(engine, req, &self.dir, run)
    }

    fn ensure(&self, engine: &dyn Engine, req: &RunRequest<'_>) -> Result<bool, EngineError> {
        if let Some(&traced) = self.traced.get() {
            return Ok(traced);
        }
        // The reference's trace keeps `reference`: an engine that replays the reference's
        // routing (moe) replays it on both sides.
        let traced = engine.trace(&RunRequest {
            mesh: None,
            mutation: None,
            out: &self.dir,
            ..*req
        })?;
        Ok(*self.traced.get_or_init(|| traced))
    }
}

/// Trace `req`'s run into `run` and compare it site by site with the reference trace in
/// `reference`.
fn localize_against(
    engine: &dyn Engine,
    req: &RunRequest<'_>,
    reference: &Path,
    run: &Path,
) -> Result<Option<Localization>, EngineError> {
    if !engine.trace(&RunRequest { out: run, ..*req })? {
        return Ok(None);
    }
    let axes = req.mesh.map(Axes::of).unwrap_or_default();
    locate(reference, run, req.dtype, &axes)
        .map(Some)
        .map_err(EngineError::run)
}

/// A roundtrip failure's localization: the checkpoint, at the first tensor that differs (the
/// level's own comparison already names it; no training trace is involved).
pub fn checkpoint_site(o: &Outcome) -> Option<Localization> {
    let c = o.comparisons.iter().find(|c| !c.passed)?;
    let first = Site {
        step: 0,
        replica: None,
        microbatch: None,
        phase: "checkpoint".to_owned(),
        site: "checkpoint".to_owned(),
        copy: None,
        what: c
            .failure
            .clone()
            .unwrap_or_else(|| "saved and loaded back".to_owned()),
        metric: "roundtrip".to_owned(),
        value: f64::INFINITY,
        limit: 0.0,
        bound: None,
    };
    Some(Localization::placed(first, c.compared))
}
