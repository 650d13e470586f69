//! The oracle's artifacts: seed checkpoint, first-step logits and loss, the loss curve,
//! first-step gradients and the weights after `oracle_steps`; with `[[resume]]` pairs, the
//! whole training state after each step the pairs' states are judged at.

use std::path::Path;
use std::time::Instant;

use indexmap::IndexMap;
use meshparity_engine::{artifact, files, replay, routing, HostTensor, Length, Manifest};

use meshparity_specs::tolerance::GRAD_NORM;

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
    let mut grads = rec.grads[0].clone();
    with_norm(&mut grads, &rec);
    save(dir, files::GRADS, &grads, &mut written)?;
    if !rec.replay.is_empty() {
        let replay = replay::replay_artifact(&rec.replay);
        save(dir, files::ROUTING_REPLAY, &replay, &mut written)?;
    }
    if let Some(w) = &rec.weights {
        save(dir, files::WEIGHTS, &w[0], &mut written)?;
    }
    // The whole state where a `[[resume]]` pair's saved and final states are judged.
    for (step, state) in &rec.states {
        save(dir, &files::state_at(*step), &state[0], &mut written)?;
    }
    let manifest = Manifest {
        steps: rec.losses.len(),
        artifacts: written,
        seconds: start.elapsed().as_secs_f64(),
        ..setup.manifest(1)
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
    // The gradient norm of every step but the last: a run skips the last step's backward
    // unless a level reads its update ([`Length::backward_at`]), which the reference and a
    // curve-only mesh run decide differently.
    let norms = &rec.grad_norms[..steps.saturating_sub(1).min(rec.grad_norms.len())];
    let mut extra: Vec<(&str, &[f64])> = Vec::new();
    if !lb.is_empty() {
        extra.push(("lb_loss", lb));
    }
    if !norms.is_empty() {
        extra.push((GRAD_NORM, norms));
    }
    artifact::write_curve(&path, &rec.losses[..steps], &extra).map_err(io(&path))?;
    written.push(files::CURVE.to_owned());
    if !rec.inputs.is_empty() {
        let path = dir.join(files::INPUTS);
        meshparity_engine::inputs::write(&path, &rec.inputs).map_err(io(&path))?;
        written.push(files::INPUTS.to_owned());
    }
    Ok(())
}

/// The first step's global gradient norm (before clipping) beside the gradients, as `grad_norm`
/// in f64: a norm summed over the wrong ranks shows here even where clipping leaves the
/// gradients alone.
pub(crate) fn with_norm(grads: &mut IndexMap<String, HostTensor>, rec: &Record) {
    if let Some(norm) = rec.grad_norms.first() {
        let t = HostTensor {
            dtype: meshparity_compare::TensorDtype::F64,
            shape: vec![1],
            bytes: norm.to_le_bytes().to_vec(),
        };
        grads.insert(GRAD_NORM.to_owned(), t);
    }
}

/// Why the ranks' gradient norms cannot be one norm: correct ranks all receive the same
/// all-reduced sums, so any two that differ clip by different norms (a norm summed over some
/// ranks only). `tolerance` is how far (relative) they may part: 0 where reductions repeat to
/// the bit (the CPU), [`super::GPU_NORM_AGREEMENT`] on a GPU.
pub(crate) fn norms_disagree(norms: &[f64], tolerance: f64) -> Option<String> {
    let first = *norms.first()?;
    let apart = |n: f64| {
        if tolerance == 0.0 {
            n.to_bits() != first.to_bits()
        } else {
            // A NaN on either side is apart: only a finite gap within the tolerance agrees.
            let within = (n - first).abs() <= tolerance * first.abs().max(f64::MIN_POSITIVE);
            !within
        }
    };
    let (rank, other) = norms.iter().enumerate().find(|(_, n)| apart(**n))?;
    Some(format!(
        "`{GRAD_NORM}`: rank {rank} computed {other}, rank 0 computed {first}: the ranks clip by different norms"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the CPU the ranks' norms must agree to the bit; on a GPU to f32 summation noise
    /// (the H200's 2.6e-10 passes), while a norm missing a shard's share (percents) never does.
    #[test]
    fn norms_agree_to_the_bit_on_the_cpu_and_to_round_off_on_a_gpu() {
        let (a, noisy) = (2.6732674447581077, 2.6732674440613406);
        assert!(norms_disagree(&[a, a], 0.0).is_none());
        assert!(norms_disagree(&[a, noisy], 0.0).is_some());
        assert!(norms_disagree(&[a, noisy], super::super::GPU_NORM_AGREEMENT).is_none());
        let why = norms_disagree(&[a, a * 0.97], super::super::GPU_NORM_AGREEMENT).unwrap();
        assert!(why.contains("rank 1"), "{why}");
        assert!(norms_disagree(&[a, f64::NAN], super::super::GPU_NORM_AGREEMENT).is_some());
    }
}
