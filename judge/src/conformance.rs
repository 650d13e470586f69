//! The conformance suite every engine must pass: the contract of [`meshparity_engine::Engine`] checked
//! from the outside, through the same judging the runner uses. An engine's own tests call
//! [`suite`] with a small model and the meshes it supports.
//!
//! What it holds an engine to:
//! - the reference writes a manifest (world size 1) and every artifact a level needs;
//! - a mesh run writes what its levels need, and a correct mesh passes every level under the
//!   built-in limits;
//! - every mutation the engine offers that applies to a mesh is caught there, and altered
//!   something (was injected at all);
//! - an engine whose runs train only as long as asked catches each mutation judged in stages
//!   as on one whole run, by levels that fail there too;
//! - a missing artifact is a judge error naming the file, never a pass;
//! - (optionally) two reference runs are bit-identical, for engines that promise it.

use std::path::Path;

use meshparity_specs::{DType, Level, Limits, MeshConfig, ModelConfig, Training};

use crate::check::check;
use crate::judge::{Judge, JudgeError};
use crate::mutation::MutationOutcome;
use crate::stages::check_until_caught;
use meshparity_engine::artifact::{files, Manifest};
use meshparity_engine::engine::{Engine, RunRequest};

/// What to run the suite on.
pub struct Setup<'a> {
    pub model: &'a ModelConfig,
    pub training: &'a Training,
    pub dtype: DType,
    /// Correct meshes to check (and to inject the engine's mutations into).
    pub meshes: &'a [MeshConfig],
    /// The limits of each level (the built-in table's, usually).
    pub levels: &'a [(Level, Limits)],
    /// Whether the engine promises bit-identical reruns.
    pub deterministic: bool,
}

/// Run the suite in `dir`; returns every violation found (empty: the engine conforms).
pub fn suite(engine: &dyn Engine, setup: &Setup<'_>, dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let all: Vec<Level> = setup.levels.iter().map(|(l, _)| *l).collect();
    let reference = dir.join("reference");
    let req = RunRequest {
        model: setup.model,
        training: setup.training,
        dtype: setup.dtype,
        mesh: None,
        levels: &all,
        mutation: None,
        reference: None,
        out: &reference,
        trace: false,
    };
    match engine.reference(&req) {
        Ok(manifest) => failures.extend(reference_conforms(&manifest, &reference)),
        Err(e) => return vec![format!("reference: {e}")],
    }
    if setup.deterministic {
        failures.extend(rerun(engine, &req, dir));
    }
    for (i, mesh) in setup.meshes.iter().enumerate() {
        let tag = mesh.tag(setup.dtype);
        let run = dir.join(format!("mesh-{i}"));
        let req = RunRequest {
            mesh: Some(mesh),
            reference: Some(&reference),
            out: &run,
            ..req
        };
        match check(
            engine,
            &req,
            setup.levels,
            &reference,
            &dir.join(format!("judged-{i}")),
        ) {
            Ok(c) => {
                for o in c.outcomes.iter().filter(|o| !o.passed) {
                    failures.push(format!(
                        "{tag}: correct mesh fails {}: {}",
                        o.level,
                        o.summary()
                    ));
                }
            }
            Err(e) => failures.push(format!("{tag}: {e}")),
        }
        failures.extend(missing_artifact(setup, &reference, &run, dir));
        if setup.deterministic {
            failures.extend(traced_as_it_ran(
                engine,
                &req,
                &dir.join(format!("traced-{i}")),
            ));
        }
        for name in engine.mutations() {
            let name = name.as_str();
            let applies = meshparity_specs::mutation::find(name)
                .is_none_or(|m| m.applies_to(setup.model, mesh, setup.training));
            if applies {
                let req = (&req, reference.as_path(), dir);
                failures.extend(mutation_conforms(engine, setup, req, i, name));
            }
        }
    }
    failures
}

/// The reference's manifest as read back is the one returned, at world size 1, with every
/// artifact a level needs.
fn reference_conforms(manifest: &Manifest, reference: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    match Manifest::read(reference) {
        Ok(read) if read == *manifest => {}
        Ok(_) => failures.push("reference: manifest.json differs from the one returned".into()),
        Err(e) => failures.push(format!("reference: {e}")),
    }
    if manifest.world_size != 1 {
        failures.push(format!("reference: world size {}", manifest.world_size));
    }
    for file in [
        files::SEED,
        files::FORWARD,
        files::CURVE,
        files::GRADS,
        files::WEIGHTS,
    ] {
        if let Err(e) = manifest.require(reference, file, "any") {
            failures.push(format!("reference: {e}"));
        }
    }
    failures
}

/// Mutation `name` on mesh `i` (`req`'s) is caught, and judged in stages as one whole run.
fn mutation_conforms(
    engine: &dyn Engine,
    setup: &Setup<'_>,
    (req, reference, dir): (&RunRequest<'_>, &Path, &Path),
    i: usize,
    name: &str,
) -> Vec<String> {
    let tag = req.mesh.map_or_else(String::new, |m| m.tag(setup.dtype));
    let out = dir.join(format!("mesh-{i}-{name}"));
    let req = RunRequest {
        mutation: Some(name),
        out: &out,
        ..*req
    };
    let judged = dir.join(format!("judged-{i}-{name}"));
    let mut failures = Vec::new();
    match check(engine, &req, setup.levels, reference, &judged) {
        Ok(c) => {
            let m = c.mutation(name);
            if !m.caught {
                failures.push(format!("{tag}: mutation `{name}`: {}", m.summary()));
            }
            if engine.runs_to_length() {
                let staged = dir.join(format!("staged-{i}-{name}"));
                failures.extend(
                    staged_agrees(engine, &req, setup.levels, reference, &staged, &m)
                        .map(|f| format!("{tag}: mutation `{name}`: {f}")),
                );
            }
        }
        Err(e) => failures.push(format!("{tag}: mutation `{name}`: {e}")),
    }
    failures
}

/// An engine whose shorter runs are the prefixes of longer ones ([`Engine::runs_to_length`])
/// must give a mutation judged in stages ([`check_until_caught`]) the verdict of one whole
/// run, caught by levels that fail there too.
fn staged_agrees(
    engine: &dyn Engine,
    req: &RunRequest<'_>,
    levels: &[(Level, Limits)],
    reference: &Path,
    dir: &Path,
    whole: &MutationOutcome,
) -> Option<String> {
    let run = dir.join("run");
    let req = RunRequest { out: &run, ..*req };
    // A caller's own file beside the judged levels (a runner job's record) must outlive the
    // stages.
    let theirs = dir.join("callers-file");
    if std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&theirs, b"kept"))
        .is_err()
    {
        return Some("cannot make a scratch file".into());
    }
    let staged = match check_until_caught(engine, &req, levels, reference, dir) {
        Ok(c) => c.mutation(whole.mutation.as_str()),
        Err(e) => return Some(format!("judged in stages: {e}")),
    };
    if !theirs.is_file() {
        return Some("judged in stages: removed a file it did not write".into());
    }
    let agrees = staged.caught == whole.caught
        && staged.caught_by.iter().all(|l| whole.caught_by.contains(l));
    (!agrees).then(|| {
        format!(
            "judged in stages: caught {} by {:?}; one whole run: caught {} by {:?}",
            staged.caught, staged.caught_by, whole.caught, whole.caught_by
        )
    })
}

/// A run asked to trace as it trains ([`RunRequest::trace`]) may hand its trace to a later
/// [`Engine::trace`] of the same computation (a caught mutation's localization): what that
/// returns must be, byte for byte, the trace the engine makes afresh — for a run of the first
/// forward alone and for one of every level.
fn traced_as_it_ran(engine: &dyn Engine, req: &RunRequest<'_>, dir: &Path) -> Vec<String> {
    let tag = req.mesh.map_or_else(String::new, |m| m.tag(req.dtype));
    let forward = [Level::Forward];
    let mut failures = Vec::new();
    for (name, levels) in [("forward", &forward[..]), ("every level", req.levels)] {
        let at = |sub: &str| dir.join(format!("{}-{sub}", name.replace(' ', "-")));
        let (ran, handed, afresh) = (at("run"), at("handed"), at("afresh"));
        let asked = RunRequest {
            levels,
            out: &ran,
            ..*req
        };
        let traced = engine
            .run(&RunRequest {
                trace: true,
                ..asked
            })
            .and_then(|_| {
                engine.trace(&RunRequest {
                    out: &handed,
                    ..asked
                })
            });
        match traced {
            Ok(true) => {}
            Ok(false) => return failures,
            Err(e) => {
                failures.push(format!("{tag}: traced as it ran ({name}): {e}"));
                continue;
            }
        }
        // Nothing to hand over: the same computation from a copy of the reference, which no
        // run of this process has traced (an earlier run of every level traced two whole
        // steps of this one, and would be handed to a request for its forward).
        let copy = dir.join("reference-copy");
        if let Some(Err(e)) = req.reference.map(|r| copy_files(r, &copy)) {
            failures.push(format!("{tag}: copying the reference: {e}"));
            continue;
        }
        if let Err(e) = engine.trace(&RunRequest {
            out: &afresh,
            reference: req.reference.map(|_| copy.as_path()),
            ..asked
        }) {
            failures.push(format!("{tag}: traced afresh ({name}): {e}"));
            continue;
        }
        for f in [files::TRACE, files::TRACE_INDEX] {
            if std::fs::read(handed.join(f)).ok() != std::fs::read(afresh.join(f)).ok() {
                failures.push(format!(
                    "{tag}: `{f}` handed over by a run traced as it ran ({name}) differs from \
                     the one traced afresh"
                ));
            }
        }
    }
    failures
}

/// Every regular file of `from` into `to`.
fn copy_files(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        if e.file_type()?.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// A second reference run must write the same bytes.
fn rerun(engine: &dyn Engine, req: &RunRequest<'_>, dir: &Path) -> Vec<String> {
    let again = dir.join("reference-again");
    if let Err(e) = engine.reference(&RunRequest {
        out: &again,
        ..*req
    }) {
        return vec![format!("reference rerun: {e}")];
    }
    [
        files::SEED,
        files::FORWARD,
        files::CURVE,
        files::GRADS,
        files::WEIGHTS,
    ]
    .iter()
    .filter(|f| std::fs::read(req.out.join(f)).ok() != std::fs::read(again.join(f)).ok())
    .map(|f| format!("reference rerun: `{f}` differs between two runs"))
    .collect()
}

/// Judging a run whose forward artifact was removed must be an error that names the file.
fn missing_artifact(setup: &Setup<'_>, reference: &Path, run: &Path, dir: &Path) -> Vec<String> {
    let Some((level, limits)) = setup.levels.iter().find(|(l, _)| *l == Level::Forward) else {
        return Vec::new();
    };
    let copy = dir.join("missing-artifact");
    let _ = std::fs::remove_dir_all(&copy);
    if std::fs::create_dir_all(&copy).is_err() {
        return vec!["cannot make a scratch directory".into()];
    }
    if std::fs::copy(run.join(files::MANIFEST), copy.join(files::MANIFEST)).is_err() {
        return vec![format!("{}: no manifest to copy", run.display())];
    }
    let judge = Judge {
        dtype: setup.dtype,
        training: setup.training,
        reference,
        run: &copy,
        out: &copy.join("judged"),
        baseline2: None,
    };
    match judge.level(*level, limits) {
        Err(JudgeError::Artifact(e)) if e.to_string().contains(files::FORWARD) => Vec::new(),
        Err(e) => vec![format!(
            "missing artifact: an error that does not name it: {e}"
        )],
        Ok(o) => vec![format!(
            "missing artifact judged as {}",
            if o.passed { "a pass" } else { "a failure" }
        )],
    }
}
