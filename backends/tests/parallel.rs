//! Every parallel layout against the single-device oracle: logits, losses, gradients and
//! weights after optimizer steps, in f64 (tight) and f32.

mod common;

use burn::tensor::{DType, Device};
use common::{mesh, tiny, tiny_moe, tiny_moe_options, training, worst};
use meshparity_backends::sharding::ShardingPlan;
use meshparity_backends::train::{self, Length, Record};
use meshparity_specs::{DropPolicy, ModelConfig, Optimizer};

const LEN: Length = Length {
    steps: 3,
    weights_after: 2,
    backward: true,
};

fn check(dtype: DType, opt: Optimizer, meshes: &[&str], limit: f64) {
    check_model(tiny(), dtype, opt, meshes, limit);
}

fn check_model(m: ModelConfig, dtype: DType, opt: Optimizer, meshes: &[&str], limit: f64) {
    let dev = Device::flex();
    let t = training(11, opt);
    let oracle = train::oracle(&m, &t, LEN, &dev, dtype);
    for name in meshes {
        let mesh = mesh(name);
        let run = train::mesh(&m, &mesh, &t, LEN, Default::default(), &dev, dtype).unwrap();
        let w = worst(&ShardingPlan::llama(&m, &mesh), &oracle, &run);
        eprintln!("{name} {dtype:?} {opt:?}: logits {:.2e} loss {:.2e} grads {:.2e} weights {:.2e} ({} calls)", w.0, w.1, w.2, w.3, run.collectives);
        assert!(run.anomalies.is_empty(), "{name}: {:?}", run.anomalies);
        assert_eq!(
            oracle.routing.len(),
            run.routing.len(),
            "{name}: routed layers"
        );
        for (l, (a, b)) in oracle.routing.iter().zip(&run.routing).enumerate() {
            assert_eq!(a.choices, b.choices, "{name}: layer {l} routed differently");
        }
        let lb = oracle
            .load_balance
            .iter()
            .zip(&run.load_balance)
            .map(|(a, b)| ((a - b) / a).abs())
            .fold(0.0, f64::max);
        assert!(lb < limit, "{name}: load-balance loss off by {lb:.2e}");
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

/// The moe family on every layout the burn engine computes for it.
const MOE_MESHES: &[&str] = &[
    "dp2",
    "tp2",
    "tp2-sp",
    "pp2-mb4",
    "dp2-tp2-pp2-mb2",
    "cp2",
    "dp2-tp2-sp-cp2",
    "dp2-ep2",
    "dp2-etp2",
    "dp4-ep2",
    "dp2-tp2-sp-ep2",
    "dp2-tp2-sp-ep2-etp2",
    "dp2-cp2-ep2",
    "dp2-ep2-pp2-mb2",
];

#[test]
fn moe_layouts_match_the_oracle_in_f64() {
    check_model(tiny_moe(), DType::F64, Optimizer::Sgd, MOE_MESHES, 1e-12);
}

#[test]
fn moe_layouts_match_the_oracle_in_f32_with_adamw() {
    check_model(tiny_moe(), DType::F32, Optimizer::Adamw, MOE_MESHES, 1e-5);
}

#[test]
fn moe_options_drop_slots_and_move_the_bias() {
    let m = tiny_moe_options(DropPolicy::Probs);
    let t = training(11, Optimizer::Sgd);
    let oracle = train::oracle(&m, &t, LEN, &Device::flex(), DType::F64);
    let dropped: usize = oracle
        .replay
        .iter()
        .flatten()
        .flat_map(|d| d.kept.as_ref().expect("capacity records the kept slots"))
        .flatten()
        .filter(|&&k| !k)
        .count();
    assert!(dropped > 0, "a capacity factor of 1 drops some slots");
    let weights = &oracle.weights.as_ref().unwrap()[0];
    let bias = &weights["layers.0.mlp.router.expert_bias"];
    assert!(
        common::values(bias).iter().any(|&b| b != 0.0),
        "the bias moved after two steps"
    );
    assert!(!oracle.grads[0].contains_key("layers.0.mlp.router.expert_bias"));
}

#[test]
fn moe_options_match_the_oracle_in_f64() {
    let m = tiny_moe_options(DropPolicy::Probs);
    check_model(m, DType::F64, Optimizer::Sgd, MOE_MESHES, 1e-12);
}

#[test]
fn moe_options_match_the_oracle_in_f32_with_adamw() {
    let m = tiny_moe_options(DropPolicy::Position);
    check_model(m, DType::F32, Optimizer::Adamw, MOE_MESHES, 1e-5);
}

/// A run asked only for the first step's forward (a mutation run's first stage) skips the
/// backward pass, and what it records of that step is bit for bit what a whole run records.
#[test]
fn a_forward_only_run_records_the_whole_runs_first_step() {
    let dev = Device::flex();
    let t = training(11, Optimizer::Adamw);
    let forward = Length {
        steps: 1,
        weights_after: 0,
        backward: false,
    };
    let models = [(tiny(), MESHES), (tiny_moe(), MOE_MESHES)];
    for (m, meshes) in models {
        for name in meshes {
            let mesh = mesh(name);
            let run = |len| train::mesh(&m, &mesh, &t, len, Default::default(), &dev, DType::F32);
            let (whole, first) = (run(LEN).unwrap(), run(forward).unwrap());
            assert_eq!(first.logits, whole.logits, "{name}: logits");
            assert_eq!(first.losses, whole.losses[..1], "{name}: loss");
            assert_eq!(first.routing.len(), whole.routing.len(), "{name}: routing");
            for (a, b) in first.routing.iter().zip(&whole.routing) {
                assert_eq!(a.choices, b.choices, "{name}: routing");
            }
            assert!(first.grads.iter().all(|g| g.is_empty()), "{name}: no grads");
            assert!(first.weights.is_none(), "{name}: no weights");
            assert!(
                first.collectives < whole.collectives,
                "{name}: the backward's collectives were not skipped"
            );
        }
    }
}

/// A run whose weights are recorded before its last step skips that step's backward pass and
/// update (nothing reads them), and every loss, gradient and weight it records is bit for bit
/// what the same run with the last backward records.
#[test]
fn the_last_steps_unread_backward_is_skipped_and_changes_nothing() {
    let dev = Device::flex();
    let t = training(5, Optimizer::Adamw);
    let whole = Length {
        weights_after: LEN.steps,
        ..LEN
    };
    assert!(!LEN.backward_at(LEN.steps - 1) && whole.backward_at(LEN.steps - 1));
    let same = |name: &str, a: &Record, b: &Record, weights: &Record| {
        assert_eq!(a.logits, b.logits, "{name}: logits");
        assert_eq!(a.losses, b.losses, "{name}: every step's loss");
        assert_eq!(a.load_balance, b.load_balance, "{name}: load balance");
        assert_eq!(a.grads, b.grads, "{name}: first-step gradients");
        assert_eq!(
            a.weights, weights.weights,
            "{name}: weights after two steps"
        );
    };
    let models = [(tiny(), MESHES), (tiny_moe(), MOE_MESHES)];
    for (m, meshes) in models {
        let two = Length { steps: 2, ..LEN };
        let oracle = |len| train::oracle(&m, &t, len, &dev, DType::F32);
        same("oracle", &oracle(LEN), &oracle(whole), &oracle(two));
        for name in meshes {
            let mesh = mesh(name);
            let run = |len| train::mesh(&m, &mesh, &t, len, Default::default(), &dev, DType::F32);
            let (skipped, full) = (run(LEN).unwrap(), run(whole).unwrap());
            same(name, &skipped, &full, &run(two).unwrap());
            assert!(
                skipped.collectives < full.collectives,
                "{name}: the last step's backward collectives were not skipped"
            );
        }
    }
}

/// A vocabulary not divisible by tp is padded (Megatron's padding), the padding masked out of
/// the softmax and label smoothing's share: every TP layout matches the unpadded oracle to
/// round-off, with label smoothing and z-loss on and off, untied and tied, down to a TP rank
/// whose whole block is padding (vocabulary 9 on tp4: blocks of 3, the last past the end).
#[test]
fn padded_vocabularies_match_the_oracle_in_f64() {
    let dev = Device::flex();
    for (vocab, tied, meshes) in [
        (
            61,
            false,
            &[
                "tp2",
                "tp4",
                "dp2-tp2-sp-pp2-mb4-gpipe",
                "tp2-sp-cp2-pp2-mb2",
            ][..],
        ),
        (62, true, &["tp4", "dp2-tp2-pp2-mb2"][..]),
        (9, false, &["tp4", "tp4-sp"][..]),
    ] {
        // kv_heads 4: tp4 splits the heads evenly.
        let m = ModelConfig {
            vocab,
            kv_heads: 4,
            tie_embeddings: Some(tied),
            mtp_layers: None,
            ..tiny()
        };
        for (smoothing, z_loss) in [(None, None), (Some(0.1), Some(1e-2))] {
            let t = meshparity_specs::Training {
                label_smoothing: smoothing,
                z_loss,
                ..training(11, Optimizer::Adamw)
            };
            let oracle = train::oracle(&m, &t, LEN, &dev, DType::F64);
            for name in meshes {
                let mesh = mesh(name);
                let plan = ShardingPlan::llama(&m, &mesh);
                let run =
                    train::mesh(&m, &mesh, &t, LEN, Default::default(), &dev, DType::F64).unwrap();
                let w = worst(&plan, &oracle, &run);
                eprintln!("vocab {vocab} tied {tied} smoothing {smoothing:?} {name}: {w:?}");
                assert!(run.anomalies.is_empty(), "{name}: {:?}", run.anomalies);
                assert!(
                    w.0 < 1e-12 && w.1 < 1e-12 && w.2 < 1e-12 && w.3 < 1e-12,
                    "vocab {vocab} on {name}: {w:?}"
                );
                // The padding never trains: the last TP rank's block holds zeros past the
                // vocabulary after the steps, and the merged head has the vocabulary's size.
                let (head, dim) = if tied {
                    ("embed.weight", 0)
                } else {
                    ("output.weight", 1)
                };
                let weights = run.weights.as_ref().unwrap();
                let rule = plan.rules.iter().find(|r| r.name == head).unwrap();
                let last = (0..weights.len())
                    .find(|&r| plan.block(rule, r) == Some(mesh.tp as usize - 1))
                    .unwrap();
                let shard = &weights[last][head];
                let block = shard.shape[dim];
                let valid = vocab as usize - (mesh.tp as usize - 1) * block;
                let values: Vec<f64> = shard
                    .bytes
                    .chunks(8)
                    .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                let padding: Vec<f64> = values
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| {
                        let v = if dim == 0 {
                            k / shard.shape[1]
                        } else {
                            k % block
                        };
                        v >= valid
                    })
                    .map(|(_, &x)| x)
                    .collect();
                assert!(!padding.is_empty() || vocab.is_multiple_of(mesh.tp));
                assert!(
                    padding.iter().all(|&x| x == 0.0),
                    "{name}: the padding trained"
                );
                let merged = plan.merge(weights).unwrap();
                assert_eq!(merged[head].shape[dim], vocab as usize);
            }
        }
    }
}
