//! The oracle's artifacts: seed checkpoint, first-step logits and loss, the loss curve,
//! first-step gradients and the weights after `oracle_steps`.

use std::path::Path;
use std::time::Instant;

use indexmap::IndexMap;

use super::update::updates;
use super::{files, io, LevelError, Setup};
use crate::checkpoint;
use crate::host::HostTensor;
use crate::sharding::Shards;
use crate::train::{self, Length, Record};

/// Steps the reference runs: enough for the curve and the oracle level.
pub fn length(setup: &Setup<'_>) -> Length {
    let t = setup.training;
    Length {
        steps: t.steps.max(t.oracle_steps).max(1) as usize,
        weights_after: t.oracle_steps as usize,
    }
}

/// Run the oracle and write its artifacts into `dir`. Returns the run's seconds.
pub fn reference(setup: &Setup<'_>, dir: &Path) -> Result<f64, LevelError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let start = Instant::now();
    let seed = train::seed_checkpoint(
        setup.model,
        setup.training.seed,
        setup.device,
        setup.burn_dtype(),
    );
    save(&dir.join(files::SEED), &seed)?;
    let rec = train::oracle(
        setup.model,
        setup.training,
        length(setup),
        setup.device,
        setup.burn_dtype(),
    );
    write_record(setup, dir, &rec, &seed)?;
    Ok(start.elapsed().as_secs_f64())
}

/// The oracle's artifacts: one rank holding every tensor.
fn write_record(
    setup: &Setup<'_>,
    dir: &Path,
    rec: &Record,
    seed: &Shards,
) -> Result<(), LevelError> {
    write_forward(dir, rec)?;
    let steps = (setup.training.steps as usize).min(rec.losses.len());
    write_curve(dir, &rec.losses[..steps])?;
    save(&dir.join(files::GRADS), &rec.grads[0])?;
    if let Some(w) = &rec.weights {
        save(&dir.join(files::WEIGHTS), &w[0])?;
        save(&dir.join(files::UPDATES), &updates(seed, &w[0]))?;
    }
    Ok(())
}

/// First-step logits and loss (the loss kept in f64, as computed).
pub(crate) fn write_forward(dir: &Path, rec: &Record) -> Result<(), LevelError> {
    let loss = HostTensor {
        dtype: meshparity_compare::TensorDtype::F64,
        shape: vec![1],
        bytes: rec.losses[0].to_le_bytes().to_vec(),
    };
    let forward: IndexMap<String, HostTensor> = [
        ("logits".to_owned(), rec.logits.clone()),
        ("loss".to_owned(), loss),
    ]
    .into_iter()
    .collect();
    save(&dir.join(files::FORWARD), &forward)
}

/// Per-step losses as JSON Lines, steps counted from 1.
pub(crate) fn write_curve(dir: &Path, losses: &[f64]) -> Result<(), LevelError> {
    let curve: String = losses
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{{\"step\": {}, \"loss\": {}}}\n", i + 1, json_f64(*l)))
        .collect();
    let path = dir.join(files::CURVE);
    std::fs::write(&path, curve).map_err(io(&path))
}

/// Full precision, and NaN/inf as Python writes them, so a diverged run reads back as such.
fn json_f64(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{x:?}")
    }
}

pub(crate) fn save(path: &Path, t: &IndexMap<String, HostTensor>) -> Result<(), LevelError> {
    checkpoint::save(path, t).map_err(io(path))
}
