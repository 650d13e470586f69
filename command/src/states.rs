//! A run's whole state where a spec's `[[resume]]` pairs are judged by it: the reference's at
//! each pair's checkpoint step and after `oracle_steps`, and a pair's resumed run's after
//! `oracle_steps`, so that a pair's merged checkpoint and final state are judged against the
//! uninterrupted run's (the oracle level's `state at the checkpoint` and `state after step N`),
//! not only against what the pair loaded.
//!
//! A program may stop when it saves (the contract, docs/engines.md), so the reference's
//! uninterrupted run cannot also save mid-way: for each checkpoint step k the reference runs the
//! program once more at world size 1 with `{{save_at}}` = k, and keeps the merged state it
//! wrote there as `state-at-stepK.safetensors`. The state after `oracle_steps` is asked with
//! `{{state_at}}` and `{{state_dir}}` (write the merged state there and train on), of the
//! reference's own run ([`final_dir`]: no run more) and of a pair's resumed run alike, and only
//! of a program whose templates name
//! `{{state_dir}}`: without it the oracle level's note says that state was not judged. Each
//! such run's own files (its sharded checkpoint, its curve) are deleted once read: a reference
//! keeps what the judge cites.

use std::path::Path;

use meshparity_engine::{checkpoint, files, EngineError, Manifest, RunRequest};

use crate::merged;
use crate::{process, CommandEngine};

/// Keep the reference's state at each step the spec's pairs judge in `out` (its artifact
/// directory) and list it in `manifest`. Returns whether any was kept.
pub(crate) fn keep(
    engine: &CommandEngine,
    req: &RunRequest<'_>,
    out: &Path,
    manifest: &mut Manifest,
) -> Result<bool, EngineError> {
    let t = req.training;
    if !names(engine, "save_dir") {
        return Ok(false);
    }
    let last = t.oracle_steps;
    let steps: Vec<u32> = t
        .states_at
        .iter()
        .copied()
        .filter(|k| *k > 0 && *k < last)
        .collect();
    for &k in &steps {
        let dir = out.join(format!("saving-at-step{k}"));
        let state_dir = dir.join(files::RESUME_CHECKPOINT);
        merged::create(&state_dir)?;
        let part = RunRequest { out: &dir, ..*req };
        let (at, into) = if k < last {
            ("save_at", "save_dir")
        } else {
            ("state_at", "state_dir")
        };
        let set = [(at, k.to_string()), (into, state_dir.display().to_string())];
        let inv = engine.invocation_with(&part, &dir, &set)?;
        process::run(&inv, &dir).map_err(EngineError::run)?;
        let to = out.join(files::state_at(k));
        take(engine, (&state_dir, into), &inv.display(), &to)?;
        manifest.artifacts.push(files::state_at(k));
        std::fs::remove_dir_all(&dir).map_err(EngineError::io("removing", &dir))?;
    }
    Ok(!steps.is_empty())
}

/// Where the reference's own run writes its state after `oracle_steps` (`{{state_dir}}`), and
/// that step, where the spec's pairs judge that state and the program can write it.
pub(crate) fn final_dir(
    engine: &CommandEngine,
    req: &RunRequest<'_>,
    out: &Path,
) -> Option<(u32, std::path::PathBuf)> {
    let last = req.training.oracle_steps;
    let asked = last > 0 && req.training.states_at.contains(&last);
    (asked && names(engine, "save_dir") && asks_final(engine))
        .then(|| (last, out.join(files::RESUME_CHECKPOINT)))
}

/// The merged state the program wrote into `dir` (the template value `value` named it there),
/// written as one checkpoint at `to`; `dir` removed once read.
pub(crate) fn take(
    engine: &CommandEngine,
    (dir, value): (&Path, &'static str),
    argv: &str,
    to: &Path,
) -> Result<(), EngineError> {
    let state = merged::merged(&engine.def.artifacts, dir, value, argv)
        .map_err(|e| merged::fail(engine, e))?;
    let bytes = checkpoint::encode(&state).map_err(|e| merged::fail(engine, e))?;
    merged::put(to, &bytes)?;
    std::fs::remove_dir_all(dir).map_err(EngineError::io("removing", dir))
}

/// Whether the program writes its merged state after a step without stopping
/// (`{{state_dir}}`): the state after `oracle_steps` is asked only of such a program.
pub(crate) fn asks_final(engine: &CommandEngine) -> bool {
    names(engine, "state_dir")
}

/// Whether the program's templates name template value `value` at all. A spec's pairs need not
/// include every model, yet every reference of a spec with pairs is asked for states: a program
/// whose templates never name `{{save_dir}}` cannot save (its own pairs would fail on their
/// own), so its reference asks for none rather than failing on a run it was never written for.
fn names(engine: &CommandEngine, value: &str) -> bool {
    engine.def.names(value)
}
