//! A caught job's smallest repro (`run --shrink`): the job's case shrunk on its own engine and
//! written into the job's `repro/` ([`crate::shrink`]).

use std::path::Path;

use meshparity_engine::{Engine, Repro};
use meshparity_specs::Level;

use crate::plan::Job;
use crate::shrink::{self, Case, Target};

/// How the job failed: what a smaller case must still do.
pub(super) struct Failure<'a> {
    pub level: Level,
    pub mutation: Option<&'a str>,
    /// The limits a failed check was judged by (`None` for a mutation).
    pub limits: Option<&'a meshparity_specs::Limits>,
    /// The first diverging site, where localized.
    pub site: Option<&'a str>,
}

/// The smallest case of `job` still failing as `what` says (built-in engine only), written
/// into `out/repro/`; `None` where none was found or it could not be written (said on stderr:
/// the verdict stands without it).
pub(super) fn shrink(
    engine: &dyn Engine,
    job: &Job,
    out: &Path,
    what: &Failure<'_>,
    budget: f64,
) -> Option<Repro> {
    if job.model_config.engine.is_some() {
        return None;
    }
    let case = Case {
        model: job.model_config.clone(),
        mesh: job.mesh_config?,
        training: job.training.clone(),
        dtype: job.dtype,
    };
    let scratch = out.join("shrink");
    let target = Target {
        engine,
        level: what.level,
        mutation: what.mutation,
        limits: what.limits,
        site: what.site,
        scratch: &scratch,
        budget: std::time::Duration::from_secs_f64(budget.max(0.0)),
    };
    let shrunk = shrink::shrink(&target, case);
    let _ = std::fs::remove_dir_all(&scratch);
    let written = shrink::write(&out.join("repro"), &shrunk?, &target);
    written
        .map_err(|e| eprintln!("writing the repro: {e}"))
        .ok()
}
