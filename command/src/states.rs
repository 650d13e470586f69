//! A reference's whole state at the steps where a spec's `[[resume]]` pairs save, so that a
//! pair's merged checkpoint is judged against the uninterrupted run's state at the same step
//! (the oracle level's `state at the checkpoint`), not only against what the pair loaded.
//!
//! A program may stop when it saves (the contract, docs/engines.md), so the reference's
//! uninterrupted run cannot also save mid-way: for each such step k the reference runs the
//! program once more at world size 1 with `{{save_at}}` = k, and keeps the merged state it
//! wrote there as `state-at-stepK.safetensors`. That run's own files (its sharded checkpoint,
//! its curve) are deleted once read: a reference keeps what the judge cites.
//!
//! The state after `oracle_steps` is not asked of a program: its pair's resumed run trains to
//! the end without saving, so there is nothing to judge it against (the oracle level's note
//! says so); the final weights are judged as every run's are.

use std::path::Path;

use meshparity_engine::{checkpoint, files, EngineError, Manifest, RunRequest};

use crate::{process, resume, CommandEngine};

/// Keep the reference's state at each pair's checkpoint step in `out` (its artifact
/// directory) and list it in `manifest`. Returns whether any was kept.
pub(crate) fn keep(
    engine: &CommandEngine,
    req: &RunRequest<'_>,
    out: &Path,
    manifest: &mut Manifest,
) -> Result<bool, EngineError> {
    let t = req.training;
    if !saves(engine) {
        return Ok(false);
    }
    let steps: Vec<u32> = t
        .states_at
        .iter()
        .copied()
        .filter(|k| *k > 0 && *k < t.oracle_steps)
        .collect();
    for &k in &steps {
        let dir = out.join(format!("saving-at-step{k}"));
        let save_dir = dir.join(files::RESUME_CHECKPOINT);
        std::fs::create_dir_all(&save_dir)
            .map_err(|e| EngineError::Run(format!("creating {}: {e}", save_dir.display())))?;
        let part = RunRequest { out: &dir, ..*req };
        let set = [
            ("save_at", k.to_string()),
            ("save_dir", save_dir.display().to_string()),
        ];
        let inv = engine.invocation_with(&part, &dir, &set)?;
        process::run(&inv, &dir).map_err(|e| EngineError::Run(e.to_string()))?;
        let state = resume::merged(&engine.def.artifacts, &save_dir, "save_dir", &inv.display())
            .map_err(|e| resume::fail(engine, e))?;
        let bytes = checkpoint::encode(&state).map_err(|e| resume::fail(engine, e))?;
        resume::put(&out.join(files::state_at(k)), &bytes)?;
        manifest.artifacts.push(files::state_at(k));
        std::fs::remove_dir_all(&dir)
            .map_err(|e| EngineError::Run(format!("removing {}: {e}", dir.display())))?;
    }
    Ok(!steps.is_empty())
}

/// Whether the program is told where to save at all. A spec's pairs need not include every
/// model, yet every reference of a spec with pairs is asked for states: a program whose
/// templates never name `{{save_dir}}` cannot save (its own pairs would fail on their own), so
/// its reference asks for none rather than failing on a run it was never written for.
fn saves(engine: &CommandEngine) -> bool {
    let def = &engine.def;
    def.args
        .iter()
        .chain(def.env.iter().map(|(_, v)| v))
        .any(|t| t.value.contains("save_dir"))
}
