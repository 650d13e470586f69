//! A caught job's smallest repro (`run --shrink`): the job's case shrunk on its own engine and
//! written into the job's `repro/` ([`crate::shrink`]).

use std::path::Path;

use meshparity_engine::Engine;
use meshparity_judge::Repro;
use meshparity_specs::Level;

use crate::plan::Job;
use crate::shrink::no_repro::NoRepro;
use crate::shrink::policy::{self, Kind, Order};
use crate::shrink::{self, Case, Command, Target};
use meshparity_specs::Spec;

/// How the job failed: what a smaller case must still do.
pub(super) struct Failure<'a> {
    pub level: Level,
    pub mutation: Option<&'a str>,
    /// The limits a failed check was judged by (`None` for a mutation).
    pub limits: Option<&'a meshparity_specs::Limits>,
    /// The first diverging site, where localized.
    pub site: Option<&'a str>,
}

/// What shrinking `job`'s failure gave: its repro, or the job that claimed this kind of
/// failure first and shrinks it instead.
pub(super) enum Shrunk {
    Here(Option<Repro>),
    In(String),
}

impl Shrunk {
    /// The outcome's `repro` and `repro_in`.
    pub(super) fn into_parts(self) -> (Option<Repro>, Option<String>) {
        match self {
            Shrunk::Here(r) => (r, None),
            Shrunk::In(job) => (None, Some(job)),
        }
    }
}

/// What `job` is shrunk on: the built-in engine (`Ok(None)`), a command engine that names
/// what may shrink, or why it cannot be.
fn command<'s>(
    spec: Option<&'s Spec>,
    job: &Job,
    mutation: Option<&str>,
) -> Result<Option<Command<'s>>, NoRepro> {
    let Some(name) = &job.model_config.engine else {
        return Ok(None);
    };
    let spec = spec.ok_or(NoRepro::SpecNotLoaded)?;
    let def = spec
        .engines
        .get(name)
        .ok_or_else(|| NoRepro::NoEngine(name.clone()))?;
    let model = job.models.first().and_then(|m| spec.models.get(m));
    if model.is_some_and(|m| m.reference.is_some()) {
        return Err(NoRepro::OtherReference);
    }
    Target::command_engine(def, mutation).map(Some)
}

/// Shrink `job`'s failure if `order` lets it: the first job to claim its kind does. A command
/// engine's job shrinks only where its engine names what may shrink.
pub(super) fn shrink(
    engine: &dyn Engine,
    spec: Option<&Spec>,
    job: &Job,
    out: &Path,
    what: &Failure<'_>,
    order: &Order,
) -> Shrunk {
    // A resumed run's failure is its checkpoint's (or its continuation's) on the pair as
    // written: shrinking the model or either mesh is not built for pairs yet.
    if job.training.resume.is_some() {
        return Shrunk::Here(None);
    }
    let command = match command(spec, job, what.mutation) {
        Ok(c) => c,
        Err(why) => {
            if job.model_config.engine.is_some() && spec.is_some() {
                eprintln!("no repro: {why}");
            }
            return Shrunk::Here(None);
        }
    };
    let model = job.models.first().map(String::as_str).unwrap_or_default();
    let level = what.level.to_string();
    let kind = match what.mutation {
        Some(mutation) => Kind::Mutation { model, mutation },
        None => Kind::Check {
            model,
            mesh: job.mesh.as_deref().unwrap_or("world1"),
            level: &level,
        },
    };
    match policy::claim(order.claims.as_deref(), &kind, &job.name) {
        Ok(()) => Shrunk::Here(search(engine, command, job, out, what, order)),
        Err(policy::ClaimedBy(by)) => Shrunk::In(by),
    }
}

/// The smallest case of `job` still failing as `what` says, written into `out/repro/`;
/// `None` where none was found or it could not be written (said on stderr: the verdict stands
/// without it).
fn search(
    engine: &dyn Engine,
    command: Option<Command<'_>>,
    job: &Job,
    out: &Path,
    what: &Failure<'_>,
    order: &Order,
) -> Option<Repro> {
    let case = Case {
        model: job.model_config.clone(),
        mesh: job.mesh_config?,
        training: job.training.clone(),
        dtype: job.dtype,
    };
    let scratch = order.tries.clone().unwrap_or_else(|| out.join("shrink"));
    let target = Target {
        engine,
        level: what.level,
        mutation: what.mutation,
        limits: what.limits,
        site: what.site,
        scratch: &scratch,
        budget: std::time::Duration::from_secs_f64(order.seconds.max(0.0)),
        command,
    };
    let shrunk = shrink::shrink(&target, case);
    let _ = std::fs::remove_dir_all(&scratch);
    let written = shrink::write(&out.join("repro"), &shrunk?, &target);
    written
        .map_err(|e| eprintln!("writing the repro: {e}"))
        .ok()
}
