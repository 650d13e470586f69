//! A mesh run judged at its levels in one go: what calibration sweeps, mutation jobs and the
//! conformance suite do per mesh. (The runner splits the same work into one engine-run job and
//! one judge job per level, so that each level is its own test case.)

use std::path::Path;
use std::time::Instant;

use meshparity_specs::{Level, Limits};

use crate::artifact::Manifest;
use crate::engine::{Engine, EngineError, RunRequest};
use crate::judge::{Judge, JudgeError};
use crate::mutation::MutationOutcome;
use crate::outcome::Outcome;

/// Why a mesh could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Judge(#[from] JudgeError),
}

/// A mesh run and what its levels found.
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
