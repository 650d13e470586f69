//! Activation recompute (`recompute = "full" | "selective"`, issue 36 item 2): backward re-runs
//! the recomputed spans' forward from their saved inputs, dropout's masks included, so a run
//! that recomputes computes bit for bit what the same run computes keeping its activations, on
//! every layout, and matches the oracle to round-off in f64.

mod common;

use burn::tensor::{DType, Device};
use common::{mesh, tiny, tiny_moe, training, worst};
use meshparity_backends::sharding::ShardingPlan;
use meshparity_backends::train::{self, Length};
use meshparity_specs::{Dropout, ModelConfig, Optimizer, Recompute, Training};

const LEN: Length = Length {
    steps: 3,
    weights_after: 2,
    backward: true,
};

const MESHES: &[&str] = &[
    "tp2",
    "tp2-sp",
    "pp2-mb4",
    "dp2-tp2-pp2-mb2",
    "cp2",
    "dp2-tp2-sp-cp2",
    "tp2-sp-cp2-pp2-mb2",
    "dp2-tp2-z2-mb2",
];

fn with(recompute: Option<Recompute>, seed: u64, optimizer: Optimizer) -> Training {
    Training {
        dropout: Some(Dropout {
            attention: 0.2,
            hidden: 0.1,
        }),
        recompute,
        ..training(seed, optimizer)
    }
}

/// Recomputing changes nothing a step computes: losses, gradients and weights are bit for bit
/// those of the run that keeps its activations (the same operations on the same values).
fn identical(m: &ModelConfig, meshes: &[&str], dtype: DType) {
    let dev = Device::flex();
    for name in meshes {
        let mesh = mesh(name);
        let run = |r| {
            let t = with(r, 5, Optimizer::Adamw);
            train::mesh(m, &mesh, &t, LEN, Default::default(), &dev, dtype).unwrap()
        };
        let kept = run(None);
        for r in [Recompute::Full, Recompute::Selective] {
            let again = run(Some(r));
            assert_eq!(kept.losses, again.losses, "{name} {r:?}: losses");
            assert_eq!(kept.grads, again.grads, "{name} {r:?}: gradients");
            assert_eq!(kept.weights, again.weights, "{name} {r:?}: weights");
        }
    }
}

#[test]
fn recompute_changes_nothing_a_step_computes() {
    identical(&tiny(), MESHES, DType::F32);
    identical(
        &tiny_moe(),
        &["tp2-sp", "dp2-ep2", "dp2-cp2-ep2"],
        DType::F32,
    );
}

#[test]
fn recompute_matches_the_oracle_in_f64() {
    let dev = Device::flex();
    for r in [Recompute::Full, Recompute::Selective] {
        let t = with(Some(r), 11, Optimizer::Sgd);
        let m = tiny();
        let oracle = train::oracle(&m, &t, LEN, &dev, DType::F64);
        for name in MESHES {
            let mesh = mesh(name);
            let run = train::mesh(&m, &mesh, &t, LEN, Default::default(), &dev, DType::F64);
            let w = worst(&ShardingPlan::llama(&m, &mesh), &oracle, &run.unwrap());
            eprintln!("{name} {r:?}: {w:?}");
            assert!(
                w.0 < 1e-12 && w.1 < 1e-12 && w.2 < 1e-12 && w.3 < 1e-12,
                "{name}: {w:?}"
            );
        }
    }
}
