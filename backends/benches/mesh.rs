//! Wall time of each quickstart mesh's training run against the oracle's, side by side in one
//! run: the same model, batch and steps; the mesh simulates every rank and collective in this
//! process. Target: mesh / oracle ≤ 1.5.
//!
//! `cargo bench -p meshparity-backends --bench mesh` (MESHPARITY_BENCH_STEPS, default 4).

use std::time::Instant;

use burn::tensor::{DType, Device};
use meshparity_backends::train::{self, Length};
use meshparity_specs::{Family, MeshConfig, ModelConfig, Optimizer, Schedule, Training};

const RUNS: usize = 5;

fn mesh(dp: u32, tp: u32, pp: u32, sp: bool, microbatches: u32) -> MeshConfig {
    MeshConfig {
        dp,
        tp,
        pp,
        sp,
        microbatches,
        schedule: Schedule::OneFOneB,
        ..MeshConfig::DEFAULT
    }
}

fn with_cp(m: MeshConfig, cp: u32) -> MeshConfig {
    MeshConfig { cp, ..m }
}

fn with_experts(m: MeshConfig, ep: u32, etp: u32) -> MeshConfig {
    MeshConfig { ep, etp, ..m }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let steps: usize = std::env::var("MESHPARITY_BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    // The quickstart's model and run.
    let model = ModelConfig {
        family: Family::Llama,
        layers: 2,
        hidden: 64,
        heads: 4,
        kv_heads: 2,
        ffn: 128,
        vocab: 128,
        seq_len: 16,
        experts: None,
        top_k: None,
        routing_replay: None,
        moe: Default::default(),
        tie_embeddings: None,
        mtp_layers: None,
        engine: None,
        params: Vec::new(),
    };
    let training = Training {
        seed: 1234,
        steps: steps as u32,
        oracle_steps: 2,
        batch: 8,
        optimizer: Optimizer::Adamw,
        lr: 1e-3,
        ..Training::default()
    };
    let len = Length {
        steps,
        weights_after: 2,
        backward: true,
    };
    // The same model with every MLP a top-2 mixture of 4 experts.
    let moe = ModelConfig {
        family: Family::Moe,
        ffn: 64,
        experts: Some(4),
        top_k: Some(2),
        ..model.clone()
    };
    let dev = Device::flex();
    let meshes = [
        ("dp2", mesh(2, 1, 1, false, 1)),
        ("tp2", mesh(1, 2, 1, false, 1)),
        ("tp2-sp", mesh(1, 2, 1, true, 1)),
        ("pp2 (1f1b, 4 mb)", mesh(1, 1, 2, false, 4)),
        ("dp2-tp2-pp2 (2 mb)", mesh(2, 2, 2, false, 2)),
        ("cp2", with_cp(mesh(1, 1, 1, false, 1), 2)),
        ("cp4", with_cp(mesh(1, 1, 1, false, 1), 4)),
        ("dp2-tp2-sp-cp2", with_cp(mesh(2, 2, 1, true, 1), 2)),
    ];
    let moe_meshes = [
        ("moe dp2", mesh(2, 1, 1, false, 1)),
        ("moe tp2-sp", mesh(1, 2, 1, true, 1)),
        ("moe cp2", with_cp(mesh(1, 1, 1, false, 1), 2)),
        ("moe dp2-ep2", with_experts(mesh(2, 1, 1, false, 1), 2, 1)),
        ("moe dp4-ep2", with_experts(mesh(4, 1, 1, false, 1), 2, 1)),
        (
            "moe dp2-tp2-sp-ep2-etp2",
            with_experts(mesh(2, 2, 1, true, 1), 2, 2),
        ),
    ];
    // Warm up: thread pools, allocator.
    train::oracle(&model, &training, len, &dev, DType::F32);
    println!("{steps} training steps, median of {RUNS} runs, interleaved");
    println!(
        "{:<24} {:>10} {:>10} {:>8}",
        "mesh", "oracle ms", "mesh ms", "ratio"
    );
    let runs = meshes
        .iter()
        .map(|(n, m)| (n, m, &model))
        .chain(moe_meshes.iter().map(|(n, m)| (n, m, &moe)));
    for (name, m, model) in runs {
        let (mut o, mut t) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            let s = Instant::now();
            train::oracle(model, &training, len, &dev, DType::F32);
            o.push(s.elapsed().as_secs_f64() * 1e3);
            let s = Instant::now();
            train::mesh(
                model,
                m,
                &training,
                len,
                Default::default(),
                &dev,
                DType::F32,
            )
            .expect("mesh runs");
            t.push(s.elapsed().as_secs_f64() * 1e3);
        }
        let (o, t) = (median(o), median(t));
        println!("{name:<24} {o:>10.1} {t:>10.1} {:>8.2}", t / o);
    }
}
