//! The oracle's artifacts: seed checkpoint, first-step logits and loss, the loss curve,
//! first-step gradients and the weights after `oracle_steps`.

use std::path::Path;
use std::time::Instant;

use indexmap::IndexMap;
use meshparity_engine::{artifact, files, replay, routing, HostTensor, Length, Manifest};

use super::{io, save, LevelError, Setup};
use crate::train::{self, Record};

/// Run the oracle for `len` and write its artifacts and manifest into `dir`.
pub fn reference(setup: &Setup<'_>, len: Length, dir: &Path) -> Result<Manifest, LevelError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let start = Instant::now();
    let mut written = Vec::new();
    let seed = train::seed_checkpoint(
        setup.model,
        setup.training.seed,
        setup.device,
        setup.burn_dtype(),
    );
    save(dir, files::SEED, &seed, &mut written)?;
    let rec = train::oracle(
        setup.model,
        setup.training,
        len,
        setup.device,
        setup.burn_dtype(),
    );
    write_trained(setup, dir, &rec, &mut written)?;
    save(dir, files::GRADS, &rec.grads[0], &mut written)?;
    if !rec.replay.is_empty() {
        let replay = replay::replay_artifact(&rec.replay);
        save(dir, files::ROUTING_REPLAY, &replay, &mut written)?;
    }
    if let Some(w) = &rec.weights {
        save(dir, files::WEIGHTS, &w[0], &mut written)?;
    }
    let manifest = Manifest {
        engine: setup.describe.engine.clone(),
        device: setup.describe.device.clone(),
        world_size: 1,
        steps: rec.losses.len(),
        artifacts: written,
        seconds: start.elapsed().as_secs_f64(),
        ..Manifest::default()
    };
    manifest.write(dir)?;
    Ok(manifest)
}

/// First-step logits and loss (the loss kept in f64, as computed), and the loss curve up to
/// the curve level's steps.
pub(crate) fn write_trained(
    setup: &Setup<'_>,
    dir: &Path,
    rec: &Record,
    written: &mut Vec<String>,
) -> Result<(), LevelError> {
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
    save(dir, files::FORWARD, &forward, written)?;
    if !rec.routing.is_empty() {
        let b = train::batch(setup.model, setup.training, 0);
        let real: Vec<bool> = (0..b.batch * b.seq_len)
            .map(|t| t % b.seq_len < b.lengths[t / b.seq_len])
            .collect();
        let layers: Vec<(Vec<Vec<usize>>, Vec<f64>)> = rec
            .routing
            .iter()
            .map(|r| (r.choices.clone(), r.scores.clone()))
            .collect();
        save(
            dir,
            files::ROUTING,
            &routing::artifact(&layers, &real, b.batch, rec.microbatch.as_deref()),
            written,
        )?;
    }
    let steps = (setup.training.steps as usize).min(rec.losses.len());
    let path = dir.join(files::CURVE);
    let lb = &rec.load_balance[..steps.min(rec.load_balance.len())];
    let extra: &[(&str, &[f64])] = if lb.is_empty() {
        &[]
    } else {
        &[("lb_loss", lb)]
    };
    artifact::write_curve(&path, &rec.losses[..steps], extra).map_err(io(&path))?;
    written.push(files::CURVE.to_owned());
    Ok(())
}
