//! Shared helpers of the backend tests: meshes by name and numeric distances.

#![allow(dead_code)]

use meshparity_backends::host::HostTensor;
use meshparity_backends::sharding::ShardingPlan;
use meshparity_backends::train::Record;
use meshparity_compare::TensorDtype;
use meshparity_specs::{Family, MeshConfig, ModelConfig, Schedule, Training};

pub fn tiny() -> ModelConfig {
    ModelConfig {
        family: Family::Llama,
        layers: 2,
        hidden: 32,
        heads: 4,
        kv_heads: 2,
        ffn: 48,
        vocab: 64,
        seq_len: 8,
        experts: None,
        top_k: None,
        routing_replay: None,
        moe: Default::default(),
        tie_embeddings: None,
        mtp_layers: None,
        engine: None,
        params: Vec::new(),
    }
}

/// [`tiny`] with a routed mixture of 4 experts, top-2, in every MLP.
pub fn tiny_moe() -> ModelConfig {
    ModelConfig {
        family: Family::Moe,
        ffn: 32,
        experts: Some(4),
        top_k: Some(2),
        ..tiny()
    }
}

/// The moe family's options all at once: sigmoid scores, the score-correction bias (updated
/// after every step from the all-reduced load), a TP-sharded shared expert and a capacity
/// factor that drops routed slots, and the load-balance loss normalized per token.
#[allow(dead_code)]
pub fn tiny_moe_options(policy: meshparity_specs::DropPolicy) -> ModelConfig {
    let mut m = tiny_moe();
    m.moe = meshparity_specs::MoeOptions {
        router: Some(meshparity_specs::RouterScore::Sigmoid),
        expert_bias: Some(true),
        shared_expert_ffn: Some(16),
        capacity_factor: Some(meshparity_specs::moe::CapacityFactor(1.0)),
        drop_policy: Some(policy),
        aux_loss_normalization: Some(meshparity_specs::AuxNormalization::Token),
    };
    m
}

pub fn training(seed: u64, optimizer: meshparity_specs::Optimizer) -> Training {
    Training {
        seed,
        steps: 3,
        oracle_steps: 2,
        batch: 8,
        optimizer,
        lr: 1e-3,
        ..Training::default()
    }
}

/// `dp2`, `tp2`, `tp2-sp`, `pp2`, `pp2-gpipe`, `dp2-tp2-pp2`, `cp2`, `mb4`...
pub fn mesh(name: &str) -> MeshConfig {
    let mut m = MeshConfig::SINGLE;
    for part in name.split('-') {
        let (key, n) = part.split_at(
            part.find(|c: char| c.is_ascii_digit())
                .unwrap_or(part.len()),
        );
        let n: u32 = n.parse().unwrap_or(1);
        match key {
            "dp" => m.dp = n,
            "tp" => m.tp = n,
            "pp" => m.pp = n,
            "cp" => m.cp = n,
            "ep" => m.ep = n,
            "etp" => m.etp = n,
            "mb" => m.microbatches = n,
            "z" => m.zero = n,
            "hs" => m.shard = n,
            "sp" => m.sp = true,
            "gpipe" => m.schedule = Schedule::GPipe,
            "interleaved" => m.schedule = Schedule::Interleaved,
            "oracle" => {}
            _ => panic!("unknown mesh part `{part}`"),
        }
    }
    m
}

pub fn values(t: &HostTensor) -> Vec<f64> {
    let b = &t.bytes;
    match t.dtype {
        TensorDtype::F64 => b
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        TensorDtype::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        TensorDtype::BF16 => b
            .chunks_exact(2)
            .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16) as f64)
            .collect(),
        d => panic!("no test decoding for {d:?}"),
    }
}

/// ‖a − b‖ / ‖a‖ over all elements.
pub fn rel_l2(a: &HostTensor, b: &HostTensor) -> f64 {
    assert_eq!(a.shape, b.shape);
    let (a, b) = (values(a), values(b));
    let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).powi(2)).sum();
    let den: f64 = a.iter().map(|x| x * x).sum();
    (num / den.max(1e-300)).sqrt()
}

/// The largest relative distance of a mesh run from the oracle: (logits, loss, gradients,
/// weights), the mesh's shards merged by `plan`.
pub fn worst(plan: &ShardingPlan, oracle: &Record, run: &Record) -> (f64, f64, f64, f64) {
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

/// Trains `t` on every mesh of `meshes` for `len` and asserts each run's worst relative L2
/// ([`worst`]: logits, gradients, moments, weights) is under `limit`, with no anomaly: the
/// parity check the feature suites (dropout, packing) share.
pub fn matches_oracle(
    m: &ModelConfig,
    t: &Training,
    meshes: &[&str],
    (dtype, len): (burn::tensor::DType, meshparity_backends::train::Length),
    limit: f64,
) {
    use meshparity_backends::train;
    let dev = burn::tensor::Device::flex();
    let oracle = train::oracle(m, t, len, &dev, dtype);
    for name in meshes {
        let mesh = mesh(name);
        let run = train::mesh(m, &mesh, t, len, Default::default(), &dev, dtype).unwrap();
        let w = worst(&ShardingPlan::llama(m, &mesh), &oracle, &run);
        eprintln!("{name} {dtype:?}: {w:?}");
        assert!(run.anomalies.is_empty(), "{name}: {:?}", run.anomalies);
        assert!(
            w.0 < limit && w.1 < limit && w.2 < limit && w.3 < limit,
            "{name}: {w:?} over {limit}"
        );
    }
}
