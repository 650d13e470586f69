//! What counting the heap costs (`meshparity_engine::heap`, on in every worker for the job's
//! memory figure): the quickstart model's training run on its meshes with counting off and on,
//! interleaved, side by side in one run. Target: on / off ≤ 1.02.
//!
//! `cargo bench -p meshparity-backends --bench heap`.

use std::time::Instant;

use burn::tensor::{DType, Device};
use meshparity_backends::train::{self, Length};
use meshparity_engine::heap::{self, Counting};
use meshparity_specs::{Family, MeshConfig, ModelConfig, Optimizer, Training};

#[global_allocator]
static GLOBAL: Counting<mimalloc::MiMalloc> = Counting(mimalloc::MiMalloc);

const RUNS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
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
        steps: 4,
        oracle_steps: 2,
        batch: 8,
        optimizer: Optimizer::Adamw,
        lr: 1e-3,
        ..Training::default()
    };
    let len = Length {
        steps: 4,
        weights_after: 2,
        backward: true,
    };
    let dev = Device::flex();
    let mesh = |dp, tp, cp| MeshConfig {
        dp,
        tp,
        cp,
        ..MeshConfig::SINGLE
    };
    let meshes = [
        ("dp2", mesh(2, 1, 1)),
        ("tp2", mesh(1, 2, 1)),
        ("dp2-tp2-cp2", mesh(2, 2, 2)),
    ];
    let run = |m: &MeshConfig| {
        let t = Instant::now();
        train::mesh(
            &model,
            m,
            &training,
            len,
            Default::default(),
            &dev,
            DType::F32,
        )
        .unwrap();
        t.elapsed().as_secs_f64()
    };
    run(&meshes[0].1);
    println!("median of {RUNS} runs, counting off and on interleaved");
    for (name, m) in &meshes {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            heap::disable();
            off.push(run(m));
            heap::enable();
            on.push(run(m));
        }
        let (off, on) = (median(off), median(on));
        println!(
            "{name:>12}: off {:.1} ms, on {:.1} ms, on/off {:.3}",
            off * 1e3,
            on * 1e3,
            on / off
        );
    }
}
