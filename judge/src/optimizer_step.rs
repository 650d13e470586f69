//! The optimizer replayed: a mesh's own update, judged against world size 1's optimizer
//! applied on the host, in f64, to the mesh's own gradients and state at the same step.
//!
//! The oracle level's update gate compares the mesh's training with the reference's, so in
//! bf16 it must allow the whole model's round-off (12 % of an update, layer-averaged): a
//! sharded optimizer that decays the norm weights it should exempt (lr·wd ≈ 5e-5 of a weight,
//! ~12 % of its update) passes it. Here the inputs are the mesh's own — the gathered gradients
//! its optimizer took and the merged state it held before the step — so nothing of the model's
//! noise enters: the mesh's weights and moments after the step must equal the replay's to the
//! round-off of the optimizer's own arithmetic (f32 master weights and moments for f32 and
//! half-precision models, f64 for f64 ones), whatever the model's dtype. Decay groups, a
//! schedule stepped too often, another shard's state and a misaligned shard are then exact
//! checks.
//!
//! The file (`meshparity_engine::files::OPTIMIZER_STEP`) holds, merged to world-size-1 names,
//! `step` (the 1-based update replayed, a u64), `grad.NAME` (the gradients the optimizer took,
//! clipped where the run clips), `before.NAME` (each parameter's weights as the optimizer held
//! them) and the AdamW moments before and after (`before.optim.exp_avg.NAME`,
//! `after.optim.exp_avg_sq.NAME`, …; none before the first update, none for SGD). The weights after
//! the step are the run's `meshparity_engine::files::WEIGHTS`, which hold the oracle's last step:
//! not written twice.

use std::path::Path;

use meshparity_compare::agreement::decode;
use meshparity_compare::TensorDtype;
use meshparity_specs::{DType, Optimizer, Training};

use meshparity_engine::checkpoint;
use meshparity_engine::optimizer::{update, ParamState, EXP_AVG, EXP_AVG_SQ};
use meshparity_engine::tensor::{HostTensor, Shards};

/// What the comparison is called in outcomes and reports.
pub const WHAT: &str = "optimizer step";
/// The metric: ‖mesh − replay‖₂ in units of the optimizer arithmetic's unit round-off at the
/// tensor's scale (ε·(‖weights‖₂ + ‖update‖₂) for weights, ε·‖moment‖₂ for a moment).
pub const METRIC: &str = "replay_ulps";
/// The limit in those units. Each element's f32 update rounds a handful of times (the decay,
/// the moments, the step, the subtraction), so a correct mesh stays within a few units; a
/// wrong decay group moves a norm weight by lr·wd of itself, ≥ 84 units at lr 1e-3 and decay
/// 0.01. Measured: docs/verdicts.md ("The optimizer replayed").
pub const LIMIT: f64 = 8.0;

/// A parameter's AdamW moments (first, second), element by element.
type Moments = (Vec<f64>, Vec<f64>);

/// Why a recorded step cannot be replayed: the file is not what it must be.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Input(#[from] meshparity_compare::InputError),
    #[error("{file}: {why}")]
    Malformed { file: String, why: String },
}

/// The unit round-off of the arithmetic an optimizer of a `dtype` model does: f32 master
/// weights and moments below f64.
pub fn epsilon(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        _ => f64::from(f32::EPSILON),
    }
}

/// The recorded step replayed: its update number and each tensor's distance from the replay.
#[derive(Clone, Debug, PartialEq)]
pub struct Replayed {
    /// The update replayed, 1-based.
    pub step: u64,
    /// A weight (`NAME`) or moment (`optim.exp_avg.NAME`, `optim.exp_avg_sq.NAME`) and its
    /// [`METRIC`] reading, in the file's order.
    pub readings: Vec<(String, f64)>,
}

/// Replay the recorded step in `path` of a run that trained with `training` in `dtype`, whose
/// weights after it are in `weights`: update `step` must be the oracle level's last
/// (`training.oracle_steps`).
pub fn replay(
    path: &Path,
    weights: &Path,
    training: &Training,
    dtype: DType,
) -> Result<Replayed, ReplayError> {
    let file = path.display().to_string();
    let malformed = |why: String| ReplayError::Malformed {
        file: file.clone(),
        why,
    };
    let mut t = checkpoint::load(path)?;
    for (name, w) in checkpoint::load(weights)? {
        if t.contains_key(&format!("grad.{name}")) {
            t.insert(format!("after.{name}"), w);
        }
    }
    let step = t
        .get("step")
        .and_then(counter)
        .ok_or_else(|| malformed("no `step` counter (a one-element u64)".to_owned()))?;
    if step != u64::from(training.oracle_steps) {
        return Err(malformed(format!(
            "the step recorded is update {step}; the oracle level's last is {}",
            training.oracle_steps
        )));
    }
    let mut readings = Vec::new();
    for name in t.keys().filter_map(|n| n.strip_prefix("grad.")) {
        readings.extend(replay_param(&t, name, step, training, dtype).map_err(malformed)?);
    }
    if readings.is_empty() {
        return Err(malformed(
            "no `grad.*` tensor: nothing to replay".to_owned(),
        ));
    }
    Ok(Replayed { step, readings })
}

/// One parameter's readings: its weights and, under AdamW, its two moments; `Err` says what
/// of the file is wrong.
fn replay_param(
    t: &Shards,
    name: &str,
    step: u64,
    training: &Training,
    dtype: DType,
) -> Result<Vec<(String, f64)>, String> {
    let values = |key: String| -> Result<Option<Vec<f64>>, String> {
        t.get(&key)
            .map(|h| floats(h).ok_or_else(|| format!("`{key}` is not a float tensor")))
            .transpose()
    };
    let need = |key: String| values(key.clone())?.ok_or_else(|| format!("`{key}` is missing"));
    let grad = need(format!("grad.{name}"))?;
    let n = grad.len();
    let moments = |side: &str| -> Result<Option<Moments>, String> {
        let m = values(format!("{side}.{EXP_AVG}{name}"))?;
        let v = values(format!("{side}.{EXP_AVG_SQ}{name}"))?;
        Ok(m.zip(v))
    };
    let before = ParamState {
        weights: need(format!("before.{name}"))?,
        moments: moments("before")?,
    };
    let after = ParamState {
        weights: need(format!("after.{name}"))?,
        moments: moments("after")?,
    };
    let adamw = training.optimizer == Optimizer::Adamw;
    if adamw && step > 1 && before.moments.is_none() {
        return Err(format!(
            "`before.{EXP_AVG}{name}` or `before.{EXP_AVG_SQ}{name}` is missing: AdamW holds \
             moments from the first update on"
        ));
    }
    // Every element must line up: a shorter tensor would be compared on its prefix only.
    let mut lens = vec![before.weights.len(), after.weights.len()];
    for (m, v) in [&before.moments, &after.moments].into_iter().flatten() {
        lens.extend([m.len(), v.len()]);
    }
    if lens.iter().any(|&l| l != n) {
        return Err(format!(
            "`{name}`: {n} gradient elements against {lens:?} in its weights and moments"
        ));
    }
    let eps = epsilon(dtype);
    let want = update(training, name, step as u32, &before, &grad);
    let moved = norm(want.weights.iter().zip(&before.weights).map(|(a, b)| a - b));
    let scale = eps * (norm(want.weights.iter().copied()) + moved);
    let mut out = vec![(
        name.to_owned(),
        reading(&after.weights, &want.weights, scale),
    )];
    if adamw {
        let (Some((m, v)), Some((wm, wv))) = (&after.moments, &want.moments) else {
            return Err(format!(
                "`{name}`: AdamW's moments after the step are missing"
            ));
        };
        for (prefix, got, want) in [(EXP_AVG, m, wm), (EXP_AVG_SQ, v, wv)] {
            let scale = eps * norm(want.iter().copied());
            out.push((format!("{prefix}{name}"), reading(got, want, scale)));
        }
    }
    Ok(out)
}

/// The optimizer's name in words.
pub fn kind(training: &Training) -> &'static str {
    match training.optimizer {
        Optimizer::Sgd => "SGD",
        Optimizer::Adamw => "AdamW",
    }
}

/// A gate's subject as a trace names the value: `param.NAME` for weights, `adam.NAME.m` and
/// `adam.NAME.v` for the moments.
pub fn site_of(subject: &str) -> String {
    match (
        subject.strip_prefix(EXP_AVG),
        subject.strip_prefix(EXP_AVG_SQ),
    ) {
        (Some(p), _) => format!("adam.{p}.m"),
        (_, Some(p)) => format!("adam.{p}.v"),
        _ => format!("param.{subject}"),
    }
}

/// The parameter a site of [`site_of`] belongs to.
pub fn param_of_site(site: &str) -> &str {
    let moment = site
        .strip_prefix("adam.")
        .and_then(|s| s.strip_suffix(".m").or_else(|| s.strip_suffix(".v")));
    moment
        .or_else(|| site.strip_prefix("param."))
        .unwrap_or(site)
}

/// `got`'s distance from `want`, in units of `scale`.
fn reading(got: &[f64], want: &[f64], scale: f64) -> f64 {
    let off = norm(got.iter().zip(want).map(|(a, b)| a - b));
    if off == 0.0 {
        0.0
    } else if scale == 0.0 {
        f64::INFINITY
    } else {
        off / scale
    }
}

fn norm(values: impl Iterator<Item = f64>) -> f64 {
    values.map(|x| x * x).sum::<f64>().sqrt()
}

/// A float tensor's elements as f64; `None` for an integer tensor.
fn floats(t: &HostTensor) -> Option<Vec<f64>> {
    if !t.dtype.is_float() {
        return None;
    }
    t.bytes
        .chunks_exact(t.dtype.size())
        .map(|b| decode(t.dtype, b))
        .collect()
}

fn counter(t: &HostTensor) -> Option<u64> {
    let bytes: [u8; 8] = t.bytes.as_slice().try_into().ok()?;
    (t.dtype == TensorDtype::U64).then(|| u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests;
