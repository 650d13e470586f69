//! Non-vacuity: a level is evidence only if the reference it is judged against does something.
//! Two dead models agree perfectly (a parity test passed that way: NVIDIA-NeMo/Automodel
//! PR#3701), so before a level can pass, the reference's own artifacts for it must show a model
//! that computes and trains:
//!
//! - **forward**: the logits are not constant over the vocabulary at every position;
//! - **curve**: the loss is not bit-identical at every step, the gradient norm (where the
//!   curve carries one) is finite and not zero at every step, and the weights moved (below);
//! - **oracle**: not every gradient is zero or non-finite, and the weights after the run's
//!   steps are not bit-identical to the seed (a learning rate of 0, a frozen model).
//!
//! - **routing**: not every real token's first choice is one and the same expert in every
//!   layer (a collapsed router — zero weights tie every score, and ties go to the lowest id —
//!   routes every token alike on a mesh and its oracle).
//!
//! A mesh run that differs from a live reference fails its comparisons anyway; one that matches
//! a dead reference fails here, as `vacuous`. The check reads the reference only, so it is the
//! same for every engine. Roundtrip (no training) is not checked.

use std::path::Path;

use meshparity_compare::agreement::decode;
use meshparity_compare::read_curve;
use meshparity_specs::Level;

use crate::gate::Gate;
use crate::judge::JudgeError;
use crate::outcome::Comparison;
use meshparity_engine::artifact::{files, Manifest};
use meshparity_engine::checkpoint;
use meshparity_engine::seal::verify_file;
use meshparity_engine::tensor::{HostTensor, Shards};

pub use crate::outcome::VACUOUS as METRIC;

/// Why the reference's artifacts for `level` show a model that does not compute or train, if
/// they do; `None` when they show one that does (or the level is not checked).
pub fn vacuity(
    level: Level,
    dir: &Path,
    manifest: &Manifest,
) -> Result<Option<String>, JudgeError> {
    let present = |file: &str| -> Result<bool, JudgeError> {
        if !manifest.has(file) {
            return Ok(false);
        }
        verify_file(dir, manifest, file)?;
        Ok(true)
    };
    Ok(match level {
        Level::Forward if present(files::FORWARD)? => {
            let t = checkpoint::load(&dir.join(files::FORWARD))?;
            t.get("logits").and_then(constant_logits)
        }
        Level::Curve if present(files::CURVE)? => {
            let curve = read_curve(&dir.join(files::CURVE))?;
            let series = |key: &str| -> Vec<f64> {
                curve
                    .steps
                    .values()
                    .filter_map(|m| m.get(key).copied())
                    .collect()
            };
            match flat_loss(&series("loss")).or_else(|| dead_norm(&series("grad_norm"))) {
                Some(why) => Some(why),
                None => frozen(dir, &present)?,
            }
        }
        Level::Oracle if present(files::GRADS)? => {
            let grads = checkpoint::load(&dir.join(files::GRADS))?;
            match zero_gradients(&grads) {
                Some(why) => Some(why),
                None => frozen(dir, &present)?,
            }
        }
        Level::Routing if present(files::ROUTING)? => {
            collapsed(&checkpoint::load(&dir.join(files::ROUTING))?)
        }
        _ => None,
    })
}

/// Every real token's first expert the same one, in every layer of a routing artifact.
fn collapsed(routing: &Shards) -> Option<String> {
    let real: Option<Vec<f64>> = routing.get("real").map(|t| values(t).collect());
    let mut only = None;
    let mut layers = 0;
    for (name, t) in routing {
        if !(name.starts_with("layers.") && name.ends_with(".experts")) {
            continue;
        }
        let k = *t.shape.last()?;
        let ids: Vec<f64> = values(t).collect();
        for (i, first) in ids.chunks(k.max(1)).map(|c| c[0]).enumerate() {
            if real.as_ref().is_some_and(|r| r.get(i) == Some(&0.0)) {
                continue;
            }
            match only {
                None => only = Some(first),
                Some(e) if e == first => {}
                Some(_) => return None,
            }
        }
        layers += 1;
    }
    let e = only?;
    Some(format!(
        "every token of the reference goes first to expert {e} in all {layers} layer(s): its router has collapsed"
    ))
}

/// Why the reference's weights after its steps show no training, where it wrote them beside
/// its seed (the built-in engine does for every run with the oracle level; the curve level
/// reads them too, since the losses of new batches differ whether or not the model trains).
fn frozen(
    dir: &Path,
    present: &dyn Fn(&str) -> Result<bool, JudgeError>,
) -> Result<Option<String>, JudgeError> {
    if !(present(files::SEED)? && present(files::WEIGHTS)?) {
        return Ok(None);
    }
    Ok(unchanged(
        &checkpoint::load(&dir.join(files::SEED))?,
        &checkpoint::load(&dir.join(files::WEIGHTS))?,
    ))
}

/// The failed comparison a vacuous level carries.
pub fn comparison(why: &str) -> Comparison {
    Comparison {
        what: "training".to_owned(),
        reference: "the reference".to_owned(),
        candidate: String::new(),
        passed: false,
        compared: 1,
        failure: Some(format!(
            "vacuous: {why}; a model that does not train agrees with any mesh, so this level \
             proves nothing (check the learning rate, frozen parameters, the data)"
        )),
        reproduce: String::new(),
        gates: vec![Gate {
            scope: "training".to_owned(),
            ..Gate::new("the reference".to_owned(), METRIC, 1.0, 0.0)
        }],
        report: serde_json::Value::Null,
        notes: Vec::new(),
        unkept: false,
    }
}

/// Every element as f64, lazily.
fn values(t: &HostTensor) -> impl Iterator<Item = f64> + '_ {
    t.bytes
        .chunks_exact(t.dtype.size())
        .map(|b| decode(t.dtype, b).unwrap_or(f64::NAN))
}

/// Logits [.., V] bit-identical over V at every position (compared as bytes: the first row
/// that varies ends the scan).
fn constant_logits(logits: &HostTensor) -> Option<String> {
    let v = *logits.shape.last()?;
    let size = logits.dtype.size();
    if v < 2 || logits.is_empty() {
        return None;
    }
    let constant = logits.bytes.chunks_exact(v * size).all(|row| {
        let first = &row[..size];
        row.chunks_exact(size).all(|x| x == first)
    });
    constant.then(|| {
        format!(
            "the reference's logits are constant over the vocabulary at all {} positions",
            logits.len() / v
        )
    })
}

/// Losses bit-identical at every one of two or more steps.
fn flat_loss(losses: &[f64]) -> Option<String> {
    let same = losses.len() >= 2 && losses.iter().all(|l| l.to_bits() == losses[0].to_bits());
    same.then(|| {
        format!(
            "the reference's loss is {} at every one of its {} steps",
            losses[0],
            losses.len()
        )
    })
}

/// A gradient norm that is zero or non-finite at every step that reports one.
fn dead_norm(norms: &[f64]) -> Option<String> {
    let dead = !norms.is_empty() && norms.iter().all(|n| *n == 0.0 || !n.is_finite());
    dead.then(|| {
        format!(
            "the reference's gradient norm is {} at every step that reports it",
            norms[0]
        )
    })
}

/// Every gradient zero or non-finite (the gradient norm beside them included).
fn zero_gradients(grads: &Shards) -> Option<String> {
    let mut elements = 0usize;
    for (name, t) in grads {
        if values(t).any(|g| g != 0.0 && g.is_finite()) {
            return None;
        }
        if name != "grad_norm" {
            elements += t.len();
        }
    }
    (elements > 0).then(|| {
        format!(
            "every one of the reference's {elements} first-step gradients is zero or non-finite"
        )
    })
}

/// Weights after the run's steps bit-identical to the seed, tensor for tensor.
fn unchanged(seed: &Shards, weights: &Shards) -> Option<String> {
    // By value, not bytes: a half-precision model's weights are its f32 master weights, its
    // seed the bf16/f16 values they start from (the cast up is exact).
    let equal = |s: &HostTensor, w: &HostTensor| {
        s.shape == w.shape
            && if s.dtype == w.dtype {
                s.bytes == w.bytes
            } else {
                values(s).zip(values(w)).all(|(a, b)| a == b)
            }
    };
    let same = !weights.is_empty()
        && weights
            .iter()
            .all(|(name, w)| seed.get(name).is_some_and(|s| equal(s, w)));
    same.then(|| {
        format!(
            "none of the reference's {} weights changed over its steps",
            weights.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use meshparity_compare::TensorDtype;

    use super::*;

    fn tensor(values: &[f64]) -> HostTensor {
        HostTensor {
            dtype: TensorDtype::F64,
            shape: vec![values.len()],
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn dead_signals_are_vacuous_and_live_ones_are_not() {
        let mut logits = tensor(&[0.5, 0.5, 0.5, 1.0, 1.0, 1.0]);
        logits.shape = vec![2, 3];
        assert!(constant_logits(&logits).is_some());
        logits.bytes[0] ^= 1;
        assert!(constant_logits(&logits).is_none());
        assert!(flat_loss(&[2.0, 2.0, 2.0]).is_some());
        assert!(flat_loss(&[2.0, 2.0, 1.999]).is_none());
        assert!(flat_loss(&[2.0]).is_none());
        assert!(dead_norm(&[0.0, f64::NAN]).is_some());
        assert!(dead_norm(&[0.0, 1e-30]).is_none());
        let zeros: Shards = [("w".to_owned(), tensor(&[0.0, -0.0]))].into();
        assert!(zero_gradients(&zeros).is_some());
        let live: Shards = [("w".to_owned(), tensor(&[0.0, 1e-300]))].into();
        assert!(zero_gradients(&live).is_none());
        assert!(unchanged(&zeros, &zeros).is_some());
        assert!(unchanged(&zeros, &live).is_none());
        // A bf16 seed (the top half of exact f32 values) against the f32 master weights it started
        // as: unchanged by value.
        let half = HostTensor {
            dtype: TensorDtype::BF16,
            shape: vec![2],
            bytes: [0.5f32, -2.0]
                .iter()
                .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
                .collect(),
        };
        let master = |v: [f32; 2]| HostTensor {
            dtype: TensorDtype::F32,
            shape: vec![2],
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let seed: Shards = [("w".to_owned(), half)].into();
        assert!(unchanged(&seed, &[("w".to_owned(), master([0.5, -2.0]))].into()).is_some());
        assert!(unchanged(&seed, &[("w".to_owned(), master([0.5, -2.001]))].into()).is_none());
        let ids = |v: &[f64]| {
            let mut t = tensor(v);
            t.shape = vec![v.len() / 2, 2];
            t
        };
        let one: Shards = [("layers.0.experts".to_owned(), ids(&[1.0, 0.0, 1.0, 3.0]))].into();
        assert!(collapsed(&one).is_some());
        let two: Shards = [("layers.0.experts".to_owned(), ids(&[1.0, 0.0, 2.0, 1.0]))].into();
        assert!(collapsed(&two).is_none());
    }
}
