//! Gradient clipping by the global norm: every layout computes the world-size-1 norm on every
//! rank and clips by it, in f64 to round-off; the catalogued norm bugs make ranks disagree or
//! inflate it.

mod common;

use burn::tensor::{DType, Device};
use common::{mesh, rel_l2, tiny, tiny_moe, training};
use meshparity_backends::parallel::Fault;
use meshparity_backends::sharding::ShardingPlan;
use meshparity_backends::train::{self, Length, Probe, Record};
use meshparity_specs::{ModelConfig, Optimizer, Training};

const LEN: Length = Length {
    steps: 3,
    weights_after: 2,
    backward: true,
};

/// Clipping at a fifth of the tiny models' first norm (about 5): every step clips.
fn clipped(opt: Optimizer) -> Training {
    Training {
        clip_grad_norm: Some(1.0),
        ..training(11, opt)
    }
}

fn run(m: &ModelConfig, name: &str, t: &Training, fault: Option<&str>) -> Record {
    let probe = Probe {
        fault: fault.map(|f| Fault::from_name(f).expect("catalogued")),
        ..Probe::default()
    };
    train::mesh(m, &mesh(name), t, LEN, probe, &Device::flex(), DType::F64).unwrap()
}

fn rel(a: f64, b: f64) -> f64 {
    ((a - b) / a).abs()
}

#[test]
fn every_layout_clips_by_the_world_size_1_norm_in_f64() {
    let dense = ["dp2", "tp2", "tp2-sp", "pp2", "cp2", "dp2-tp2-pp2"];
    let moe = ["tp2-sp", "dp2-ep2", "dp2-tp2-sp-ep2-etp2"];
    let cases = dense
        .iter()
        .map(|n| (tiny(), *n))
        .chain(moe.iter().map(|n| (tiny_moe(), *n)));
    for (m, name) in cases {
        let t = clipped(Optimizer::Sgd);
        let oracle = train::oracle(&m, &t, LEN, &Device::flex(), DType::F64);
        assert!(oracle.grad_norms[0] > 2.0, "the test must clip");
        let unclipped = train::oracle(
            &m,
            &training(11, Optimizer::Sgd),
            LEN,
            &Device::flex(),
            DType::F64,
        );
        let r = run(&m, name, &t, None);
        assert_eq!(r.grad_norms.len(), oracle.grad_norms.len(), "{name}");
        for (s, (a, b)) in oracle.grad_norms.iter().zip(&r.grad_norms).enumerate() {
            assert!(rel(*a, *b) < 1e-12, "{name} step {s}: norm {b} vs {a}");
        }
        let first = r.rank_norms[0];
        assert!(r.rank_norms.iter().all(|n| n.to_bits() == first.to_bits()));
        let grads = ShardingPlan::llama(&m, &mesh(name))
            .merge(&r.grads)
            .unwrap();
        for (n, g) in &oracle.grads[0] {
            assert!(
                rel_l2(g, &grads[n]) < 1e-11,
                "{name}: {n} clipped differently"
            );
            let scale = rel_l2(&unclipped.grads[0][n], g);
            assert!(scale > 0.5, "{name}: {n} was not clipped ({scale})");
        }
    }
}

#[test]
fn the_norm_bugs_make_ranks_disagree_or_inflate_it() {
    let t = clipped(Optimizer::Adamw);
    let norms = |m: &ModelConfig, name: &str, f: &str| run(m, name, &t, Some(f)).rank_norms;
    let distinct = |v: &[f64]| v.iter().any(|n| n.to_bits() != v[0].to_bits());
    for name in ["tp2", "pp2", "dp2-tp2-pp2"] {
        assert!(
            distinct(&norms(&tiny(), name, "clip-norm-local-shards")),
            "{name}"
        );
    }
    assert!(distinct(&norms(
        &tiny_moe(),
        "dp2-ep2",
        "clip-norm-missing-ep"
    )));
    let correct = run(&tiny_moe(), "tp2-sp", &t, None).rank_norms[0];
    let inflated = norms(&tiny_moe(), "tp2-sp", "clip-norm-tp-duplicates");
    assert!(!distinct(&inflated));
    assert!(inflated[0] > correct * 1.01, "{} vs {correct}", inflated[0]);
    // No-ops at world size 1.
    let single = run(&tiny_moe(), "dp1", &t, None).rank_norms;
    for f in [
        "clip-norm-local-shards",
        "clip-norm-tp-duplicates",
        "clip-norm-missing-ep",
    ] {
        assert_eq!(norms(&tiny_moe(), "dp1", f), single, "{f}");
    }
}
