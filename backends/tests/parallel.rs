//! Every parallel layout against the single-device oracle: logits, losses, gradients and
//! weights after optimizer steps, in f64 (tight) and f32.

mod common;

use burn::tensor::{DType, Device};
use common::{mesh, rel_l2, tiny, training};
use meshparity_backends::sharding::ShardingPlan;
use meshparity_backends::train::{self, Length, Record};
use meshparity_specs::Optimizer;

const LEN: Length = Length {
    steps: 3,
    weights_after: 2,
};

fn worst(plan: &ShardingPlan, oracle: &Record, run: &Record) -> (f64, f64, f64, f64) {
    let grads = plan.merge(&run.grads).unwrap();
    let weights = plan.merge(run.weights.as_ref().unwrap()).unwrap();
    let loss = oracle
        .losses
        .iter()
        .zip(&run.losses)
        .map(|(a, b)| ((a - b) / a).abs())
        .fold(0.0, f64::max);
    let grads = oracle.grads[0]
        .iter()
        .map(|(n, t)| rel_l2(t, &grads[n]))
        .fold(0.0, f64::max);
    let weights = oracle.weights.as_ref().unwrap()[0]
        .iter()
        .map(|(n, t)| rel_l2(t, &weights[n]))
        .fold(0.0, f64::max);
    (rel_l2(&oracle.logits, &run.logits), loss, grads, weights)
}

fn check(dtype: DType, opt: Optimizer, meshes: &[&str], limit: f64) {
    let dev = Device::flex();
    let (m, t) = (tiny(), training(11, opt));
    let oracle = train::oracle(&m, &t, LEN, &dev, dtype);
    for name in meshes {
        let mesh = mesh(name);
        let run = train::mesh(&m, &mesh, &t, LEN, Default::default(), &dev, dtype).unwrap();
        let w = worst(&ShardingPlan::llama(&m, &mesh), &oracle, &run);
        eprintln!("{name} {dtype:?} {opt:?}: logits {:.2e} loss {:.2e} grads {:.2e} weights {:.2e} ({} calls)", w.0, w.1, w.2, w.3, run.collectives);
        assert!(run.anomalies.is_empty(), "{name}: {:?}", run.anomalies);
        assert!(
            w.0 < limit && w.1 < limit && w.2 < limit && w.3 < limit,
            "{name}: {w:?} over {limit}"
        );
    }
}

const MESHES: &[&str] = &[
    "dp2",
    "tp2",
    "tp2-sp",
    "pp2-mb4",
    "pp2-mb4-gpipe",
    "dp2-tp2-pp2-mb2",
    "dp2-mb2",
    "dp2-tp2-sp-pp2-mb4-gpipe",
    "dp4",
    "cp2",
    "cp4",
    "dp2-cp2",
    "tp2-cp2",
    "dp2-tp2-sp-cp2",
    "tp2-sp-cp2-pp2-mb2",
];

#[test]
fn every_layout_matches_the_oracle_in_f64() {
    check(DType::F64, Optimizer::Sgd, MESHES, 1e-12);
}

#[test]
fn every_layout_matches_the_oracle_in_f32_with_adamw() {
    check(DType::F32, Optimizer::Adamw, MESHES, 1e-5);
}
