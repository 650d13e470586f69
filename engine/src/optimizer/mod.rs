//! World size 1's optimizer, as the spec defines it: AdamW or SGD with decoupled weight decay,
//! its decay groups and its learning-rate schedule. One source of these rules for every engine
//! that implements them (the burn engine's `optim.rs` takes its constants and decay groups from
//! here) and for the judge that replays a mesh's optimizer step on the host in f64
//! (`meshparity_judge::optimizer_step`; the file it reads is [`step`]'s), so a sharded optimizer's bug is an exact check whatever the model's dtype.

use meshparity_specs::run::Optimizer as Kind;
use meshparity_specs::schedule::decays;
use meshparity_specs::Training;

pub mod step;

/// Where a checkpoint's state keeps a parameter's AdamW moments: `optim.exp_avg.NAME` and
/// `optim.exp_avg_sq.NAME` (the burn engine's state and the recorded step alike).
pub const EXP_AVG: &str = "optim.exp_avg.";
pub const EXP_AVG_SQ: &str = "optim.exp_avg_sq.";

/// AdamW constants (PyTorch defaults but for weight decay, kept small so it acts).
pub const BETA1: f64 = 0.9;
pub const BETA2: f64 = 0.999;
pub const EPS: f64 = 1e-8;
/// AdamW's decay of every parameter where `[run] weight_decay` is unset (the built-in engine's
/// behaviour before the key existed).
pub const WEIGHT_DECAY: f64 = 0.01;

/// The decoupled weight decay of parameter `name`: `[run] weight_decay` on matrices (norms and
/// biases exempt); unset, AdamW's [`WEIGHT_DECAY`] on every parameter and none for SGD.
pub fn decay(training: &Training, name: &str) -> f64 {
    match (training.weight_decay, training.optimizer) {
        (Some(wd), _) if decays(name) => wd,
        (Some(_), _) => 0.0,
        (None, Kind::Adamw) => WEIGHT_DECAY,
        (None, Kind::Sgd) => 0.0,
    }
}

/// One parameter's state around an update, in f64: its weights and AdamW moments (empty
/// before the first update, and for SGD).
#[derive(Clone, Debug, PartialEq)]
pub struct ParamState {
    pub weights: Vec<f64>,
    pub moments: Option<(Vec<f64>, Vec<f64>)>,
}

/// Update number `step` (1-based: AdamW's bias correction counts it) of parameter `name` with
/// gradient `grad`, as world size 1 makes it: the rate is the schedule's at `step − 1`, the
/// decay the parameter's group's.
pub fn update(
    training: &Training,
    name: &str,
    step: u32,
    before: &ParamState,
    grad: &[f64],
) -> ParamState {
    let lr = training.lr_at(step.saturating_sub(1));
    let shrink = 1.0 - lr * decay(training, name);
    let decayed = before.weights.iter().map(|w| w * shrink);
    match training.optimizer {
        Kind::Sgd => ParamState {
            weights: decayed.zip(grad).map(|(w, g)| w - g * lr).collect(),
            moments: None,
        },
        Kind::Adamw => {
            let zeros = vec![0.0; grad.len()];
            let (m0, v0) = before
                .moments
                .as_ref()
                .map_or((&zeros, &zeros), |(m, v)| (m, v));
            let m: Vec<f64> = m0
                .iter()
                .zip(grad)
                .map(|(m, g)| m * BETA1 + g * (1.0 - BETA1))
                .collect();
            let v: Vec<f64> = v0
                .iter()
                .zip(grad)
                .map(|(v, g)| v * BETA2 + g * g * (1.0 - BETA2))
                .collect();
            let t = i32::try_from(step).unwrap_or(i32::MAX);
            let (c1, c2) = (1.0 - BETA1.powi(t), 1.0 - BETA2.powi(t));
            let weights = decayed
                .zip(&m)
                .zip(&v)
                .map(|((w, m), v)| w - (m / c1) / ((v / c2).sqrt() + EPS) * lr)
                .collect();
            ParamState {
                weights,
                moments: Some((m, v)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A training for the tests: 4 steps, the oracle's 2, lr 1e-3, every optional key unset.
    fn training(optimizer: Kind, weight_decay: Option<f64>) -> Training {
        serde_json::from_value(serde_json::json!({
            "seed": 1, "steps": 4, "oracle_steps": 2, "batch": 8, "optimizer": optimizer,
            "lr": 1e-3, "weight_decay": weight_decay,
        }))
        .expect("a training")
    }

    /// AdamW's first update moves each weight by lr against its gradient's sign (m̂/√v̂ = ±1),
    /// after decaying it; an exempt norm weight is not decayed; SGD keeps no moments.
    #[test]
    fn first_updates_follow_the_formulas() {
        let t = Training {
            lr: 1e-2,
            ..training(Kind::Adamw, Some(0.1))
        };
        let before = ParamState {
            weights: vec![1.0, -2.0],
            moments: None,
        };
        let w = update(&t, "layers.0.mlp.up.weight", 1, &before, &[0.5, -3.0]);
        let want = [1.0 * (1.0 - 1e-3) - 1e-2, -2.0 * (1.0 - 1e-3) + 1e-2];
        for (a, b) in w.weights.iter().zip(want) {
            assert!((a - b).abs() < 1e-9, "{a} {b}");
        }
        let n = update(&t, "norm.weight", 1, &before, &[0.5, -3.0]);
        assert!((n.weights[0] - (1.0 - 1e-2)).abs() < 1e-9);
        let (m, v) = n.moments.unwrap();
        assert!((m[1] + 0.3).abs() < 1e-12 && (v[1] - 9e-3).abs() < 1e-12);
        let sgd = Training {
            lr: 1e-2,
            ..training(Kind::Sgd, None)
        };
        let s = update(&sgd, "w", 1, &before, &[0.5, -3.0]);
        assert_eq!(s.weights, vec![1.0 - 5e-3, -2.0 + 3e-2]);
        assert!(s.moments.is_none());
    }
}
