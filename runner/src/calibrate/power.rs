//! Detection power (`meshparity calibrate --power`): how small a bug the spec's gates can see.
//! Each perturbation class is a catalogued fault whose factor the built-in engine can set
//! (`NAME@ε`: one rank's gradients ×(1+ε), noise of relative size ε on one shard of an
//! activation, one optimizer-state shard moved toward another's, …); the sweep runs it at every size of a
//! 1-2-5 ladder on every seed, judges every level, and reports per (mesh, level) the smallest ε
//! such that it and every larger one were caught on every seed — "this spec detects a 0.5 %
//! single-rank gradient scaling on tp2". No published parity test states its power
//! (keras-team/keras-hub PR#2809 lost 1e-5 sensitivity to loosened tolerances unnoticed).

use std::collections::BTreeMap;

use meshparity_reports::calibration::Power;
use meshparity_specs::catalog;

use super::sweep::Sample;
use super::units::Unit;
use super::Config;

/// One kind of perturbation.
pub struct Perturbation {
    pub class: &'static str,
    /// The catalogued fault it sizes.
    pub fault: &'static str,
    /// What it does at size ε.
    pub what: &'static str,
}

pub const PERTURBATIONS: &[Perturbation] = &[
    Perturbation {
        class: "rank-grad-scale",
        fault: "scale-one-rank-grad",
        what: "the last rank's gradients ×(1+ε) before their reductions",
    },
    Perturbation {
        class: "replica-grad-short",
        fault: "dp-wrong-accumulation-count",
        what: "the last data-parallel replica's accumulated gradients ×(1−ε)",
    },
    Perturbation {
        class: "microbatch-short",
        fault: "grad-reduce-before-last-microbatch",
        what: "the last microbatch's gradients reach the accumulator ×(1−ε): a fraction ε lost",
    },
    Perturbation {
        class: "residual-scale",
        fault: "residual-scale-all-ranks",
        what: "the first layer's attention residual branch ×(1+ε) on every rank",
    },
    Perturbation {
        class: "activation-shard-noise",
        fault: "activation-shard-corrupted",
        what: "noise of relative size ε on one TP rank's partial output of the first MLP",
    },
    Perturbation {
        class: "optimizer-state-shard",
        fault: "zero-foreign-optimizer-state",
        what: "one rank's AdamW moments moved the fraction ε toward its neighbour shard's",
    },
];

/// The sizes tried, largest first: 1-2-5 steps from 1 down to 1e-6.
pub fn ladder() -> Vec<f64> {
    (0..=6)
        .flat_map(|k| [1.0, 0.5, 0.2].map(|m| m * 10f64.powi(-k)))
        .filter(|&e| e >= 1e-6)
        .collect()
}

/// The mutation name of `p` at size `eps`.
pub fn name(p: &Perturbation, eps: f64) -> String {
    format!("{}@{eps:e}", p.fault)
}

/// The perturbation and size a mutation name stands for, if it is one.
pub fn parse(mutation: &str) -> Option<(&'static Perturbation, f64)> {
    let (fault, eps) = mutation.split_once('@')?;
    let p = PERTURBATIONS.iter().find(|p| p.fault == fault)?;
    Some((p, eps.parse().ok()?))
}

/// Each unit's meshes with their mutations replaced by every perturbation that applies there
/// at every size of the ladder. Only the built-in engine sizes its faults: other engines' units
/// keep no mutations.
pub fn units(units: Vec<Unit>) -> Vec<Unit> {
    units
        .into_iter()
        .map(|mut u| {
            let builtin = u.model_config.engine.is_none();
            for m in &mut u.meshes {
                m.mutations = if builtin {
                    PERTURBATIONS
                        .iter()
                        .filter(|p| {
                            catalog::find(p.fault).is_some_and(|f| {
                                f.applies_to(&u.model_config, &m.config, &m.training(&u.training))
                            })
                        })
                        .flat_map(|p| ladder().into_iter().map(move |e| name(p, e)))
                        .collect()
                } else {
                    Vec::new()
                };
            }
            u
        })
        .collect()
}

/// (configuration, model, mesh, class, level) → size → (runs, caught).
type Tally = BTreeMap<(usize, String, String, String, String), BTreeMap<u64, (u64, u64)>>;

/// The power table from the perturbation samples (errored samples count as not caught).
pub fn summarize(configs: &[Config], samples: &[&Sample]) -> Vec<Power> {
    let mut tally = Tally::new();
    let mut dtypes = BTreeMap::new();
    for s in samples {
        let Some((p, eps)) = s.mutation.as_deref().and_then(parse) else {
            continue;
        };
        dtypes.insert((s.config, s.model.clone()), s.dtype.to_string());
        let any = s.error.is_none() && s.injected && s.levels.iter().any(|l| !l.passed);
        let levels = s
            .levels
            .iter()
            .map(|l| (l.level.to_string(), !l.passed && s.injected))
            .chain([("any".to_owned(), any)]);
        for (level, caught) in levels {
            let key = (
                s.config,
                s.model.clone(),
                s.mesh.clone(),
                p.class.to_owned(),
                level,
            );
            // Sizes as exact integers (parts per 10¹²) so that they key a map.
            let cell = tally
                .entry(key)
                .or_default()
                .entry((eps * 1e12).round() as u64)
                .or_default();
            cell.0 += 1;
            cell.1 += u64::from(caught);
        }
    }
    tally
        .into_iter()
        .map(|((c, model, mesh, class, level), sizes)| {
            let p = PERTURBATIONS
                .iter()
                .find(|p| p.class == class)
                .expect("tallied classes are listed");
            // Largest first: the smallest size before the first one missed on some seed.
            let tried: Vec<(f64, (u64, u64))> = sizes
                .into_iter()
                .rev()
                .map(|(e, n)| (e as f64 / 1e12, n))
                .collect();
            let smallest = tried
                .iter()
                .take_while(|(_, (runs, caught))| caught == runs)
                .last()
                .map(|(e, _)| *e);
            Power {
                config: configs[c].label(),
                dtype: dtypes[&(c, model.clone())].clone(),
                model,
                mesh,
                perturbation: class,
                what: p.what.to_owned(),
                level,
                smallest,
                seeds: tried.first().map_or(0, |(_, (runs, _))| *runs),
                tried: tried.iter().map(|(e, _)| *e).collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_the_ladder_descends() {
        let l = ladder();
        assert_eq!(l.first(), Some(&1.0));
        assert!(l.windows(2).all(|w| w[0] > w[1]));
        assert!((l.last().unwrap() - 1e-6).abs() < 1e-18);
        let p = &PERTURBATIONS[0];
        let (q, e) = parse(&name(p, 2e-3)).unwrap();
        assert_eq!((q.class, e), (p.class, 2e-3));
        assert!(parse("scale-one-rank-grad").is_none());
    }
}
