//! Activation recompute's memory, measured: the heap a training step grows by, counted by the
//! allocator as a worker counts it (`meshparity_engine::heap`). One test in its own binary, so
//! that no other test's allocations are counted.

mod common;

use burn::tensor::{DType, Device};
use common::{mesh, tiny, training};
use meshparity_backends::train::{self, Length};
use meshparity_engine::heap::{self, Counting};
use meshparity_specs::{Dropout, ModelConfig, Optimizer, Recompute, Training};

#[global_allocator]
static GLOBAL: Counting<std::alloc::System> = Counting(std::alloc::System);

const LEN: Length = Length {
    steps: 2,
    weights_after: 2,
    backward: true,
};

fn with(recompute: Option<Recompute>) -> Training {
    Training {
        dropout: Some(Dropout {
            attention: 0.2,
            hidden: 0.1,
        }),
        recompute,
        ..training(5, Optimizer::Adamw)
    }
}

/// Recompute holds less: the activations a step keeps for backward shrink (full recompute keeps
/// each layer's input and output only; selective drops the core attention's), and the re-runs
/// are real: a full recompute makes the forward's collectives again in backward.
#[test]
fn recompute_holds_less_and_runs_the_forward_again() {
    heap::enable();
    let dev = Device::flex();
    let m = ModelConfig {
        layers: 4,
        seq_len: 64,
        ..tiny()
    };
    for name in ["tp2", "dp2-tp2-sp-cp2", "tp2-pp2-mb4"] {
        let mesh = mesh(name);
        let run = |r| {
            let t = with(r);
            train::mesh(&m, &mesh, &t, LEN, Default::default(), &dev, DType::F32).unwrap()
        };
        let (kept, full, selective) = (
            run(None),
            run(Some(Recompute::Full)),
            run(Some(Recompute::Selective)),
        );
        let bytes = |r: &train::Record| r.activation_bytes.unwrap() as f64;
        eprintln!(
            "{name}: held {:.0} kB kept, {:.0} kB selective ({:.2}×), {:.0} kB full ({:.2}×); \
             collectives {} kept, {} full",
            bytes(&kept) / 1e3,
            bytes(&selective) / 1e3,
            bytes(&selective) / bytes(&kept),
            bytes(&full) / 1e3,
            bytes(&full) / bytes(&kept),
            kept.collectives,
            full.collectives
        );
        assert!(
            bytes(&full) < bytes(&kept),
            "{name}: full recompute held as much"
        );
        assert!(
            bytes(&selective) < bytes(&kept),
            "{name}: selective held as much"
        );
        assert!(bytes(&full) < bytes(&selective), "{name}");
        assert!(
            full.collectives > kept.collectives,
            "{name}: nothing re-ran"
        );
    }
}
