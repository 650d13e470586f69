//! A `[[resume]]` pair's training state against the reference's at the same step: the state
//! its first mesh saved at the checkpoint, and its state after `oracle_steps`.
//!
//! Both sides are world-size-1 states as a checkpoint holds them (weights as the optimizer
//! holds them, first and second moments, integer counters): the built-in engine's
//! (`optim.exp_avg.*`, `optim.exp_avg_sq.*`, u64 `optim.step`...) or a program's merged state
//! (the JAX example's `exp_avg.*`, `exp_avg_sq.*`, i64 `step`).
//! They are judged in the terms the oracle level already gates:
//!
//! - each weight as its update from the seed (what the optimizer did, [`crate::update`]);
//! - each first moment as it is (an average of gradients, as small as they are);
//! - each second moment as its square root (an average of |gradient|, on the gradients' scale:
//!   the square itself would double every relative difference and square the range);
//!
//! under the oracle's tolerance, and the counters (updates done, schedule, data and random
//! positions) bit-exact, because no layout may count a step differently.

use std::path::Path;

use meshparity_compare::agreement::decode;
use meshparity_compare::{Profile, TensorDtype, Tolerance};
use meshparity_specs::Limits;

use crate::derived::{compare_derived, Side};
use crate::judge::JudgeError;
use crate::outcome::Comparison;
use meshparity_engine::checkpoint;
use meshparity_engine::tensor::{HostTensor, Shards};

/// The part of a name that marks a second moment (torch's and the built-in engine's word).
const EXP_AVG_SQ: &str = "exp_avg_sq";

/// The two states to judge and where to write what is derived from them.
pub struct States<'a> {
    /// `what` in the verdicts: `state at the checkpoint (step 2)`.
    pub what: String,
    pub reference: &'a Path,
    pub run: &'a Path,
    /// The reference's seed checkpoint (weights are judged as updates from it).
    pub seed: &'a Path,
    /// The judge's directory, and a tag for the derived files' names.
    pub out: &'a Path,
    pub tag: String,
}

/// The values under `tolerance` and the counters bit-exact: two comparisons.
pub fn judge(
    s: &States<'_>,
    tolerance: Tolerance,
    limits: &Limits,
) -> Result<[Comparison; 2], JudgeError> {
    let seed = checkpoint::load(s.seed)?;
    let (reference, run) = (checkpoint::load(s.reference)?, checkpoint::load(s.run)?);
    let (ref_values, ref_counters) = view(&seed, &reference);
    let (run_values, run_counters) = view(&seed, &run);
    let values = one(
        s,
        &format!("{} (updates, moments)", s.what),
        "values",
        [ref_values, run_values],
        tolerance,
        limits,
    )?;
    let exact = Tolerance {
        profile: Profile::Exact,
        ..Tolerance::default()
    };
    let counters = one(
        s,
        &format!("{} (counters)", s.what),
        "counters",
        [ref_counters, run_counters],
        exact,
        &Limits::exact(),
    )?;
    Ok([values, counters])
}

/// One comparison of two derived states, named `{side}-{tag}-{part}.safetensors` when written.
fn one(
    s: &States<'_>,
    what: &str,
    part: &str,
    [a, b]: [Shards; 2],
    tolerance: Tolerance,
    limits: &Limits,
) -> Result<Comparison, JudgeError> {
    let side = |tensors: Shards, name: &str| Side {
        tensors,
        path: s.out.join(format!("{name}-{}-{part}.safetensors", s.tag)),
    };
    let sides = [side(a, "reference"), side(b, "run")];
    compare_derived(what, sides, tolerance, limits)
}

/// A state as judged: (values in f64, counters as they are). A weight is an entry the seed
/// holds in the same shape; a counter any integer entry; a second moment any entry named
/// `exp_avg_sq` in one of its dotted parts (the built-in engine's `optim.exp_avg_sq.NAME`, a
/// torch or JAX program's `exp_avg_sq.NAME`), compared as its square root under the name with
/// that part `sqrt_exp_avg_sq`; everything else (first moments, buffers) as it is.
fn view(seed: &Shards, state: &Shards) -> (Shards, Shards) {
    let (mut values, mut counters) = (Shards::new(), Shards::new());
    for (name, t) in state {
        if !t.dtype.is_float() {
            counters.insert(name.clone(), t.clone());
        } else if let Some(root) = sqrt_name(name) {
            values.insert(root, map(t, None, f64::sqrt));
        } else {
            let from = seed.get(name).filter(|s| s.shape == t.shape);
            values.insert(name.clone(), map(t, from, |x| x));
        }
    }
    (values, counters)
}

/// The name a second moment is compared under, its square root's; `None` for other entries.
fn sqrt_name(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split('.').collect();
    let at = parts.iter().position(|p| *p == EXP_AVG_SQ)?;
    let mut renamed: Vec<String> = parts.iter().map(|p| (*p).to_owned()).collect();
    renamed[at] = format!("sqrt_{EXP_AVG_SQ}");
    Some(renamed.join("."))
}

/// `f` of every element of `t` (less `from`'s element where given), in f64.
fn map(t: &HostTensor, from: Option<&HostTensor>, f: impl Fn(f64) -> f64) -> HostTensor {
    let size = t.dtype.size();
    let at = |x: &HostTensor, i: usize| {
        let s = x.dtype.size();
        decode(x.dtype, &x.bytes[i * s..(i + 1) * s]).unwrap_or(f64::NAN)
    };
    let n = t.bytes.len() / size.max(1);
    let bytes = (0..n)
        .flat_map(|i| {
            let base = from.map_or(0.0, |s| at(s, i));
            f(at(t, i) - base).to_le_bytes()
        })
        .collect();
    HostTensor {
        dtype: TensorDtype::F64,
        shape: t.shape.clone(),
        bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f32]) -> HostTensor {
        HostTensor {
            dtype: TensorDtype::F32,
            shape: vec![v.len()],
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    fn values(t: &HostTensor) -> Vec<f64> {
        t.bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// Weights become updates, second moments their square roots, counters stay u64 apart.
    #[test]
    fn a_state_is_judged_as_updates_moments_and_counters() {
        let seed: Shards = [("w".to_owned(), t(&[1.0, 2.0]))].into_iter().collect();
        let step = HostTensor {
            dtype: TensorDtype::U64,
            shape: vec![1],
            bytes: 3u64.to_le_bytes().to_vec(),
        };
        let state: Shards = [
            ("w".to_owned(), t(&[1.5, 2.0])),
            ("optim.exp_avg.w".to_owned(), t(&[0.25, -0.5])),
            ("optim.exp_avg_sq.w".to_owned(), t(&[0.25, 4.0])),
            ("optim.step".to_owned(), step.clone()),
        ]
        .into_iter()
        .collect();
        let (v, c) = view(&seed, &state);
        assert_eq!(values(&v["w"]), [0.5, 0.0]);
        assert_eq!(values(&v["optim.exp_avg.w"]), [0.25, -0.5]);
        assert_eq!(values(&v["optim.sqrt_exp_avg_sq.w"]), [0.5, 2.0]);
        assert!(!v.contains_key("optim.exp_avg_sq.w"));
        assert_eq!(c["optim.step"], step);
        // A program's own names: `exp_avg_sq.w`, an i64 `step`.
        let step = HostTensor {
            dtype: TensorDtype::I64,
            ..step
        };
        let program: Shards = [
            ("exp_avg_sq.w".to_owned(), t(&[9.0, 1.0])),
            ("step".to_owned(), step),
        ]
        .into_iter()
        .collect();
        let (v, c) = view(&seed, &program);
        assert_eq!(values(&v["sqrt_exp_avg_sq.w"]), [3.0, 1.0]);
        assert!(c.contains_key("step") && !v.contains_key("step"));
    }
}
