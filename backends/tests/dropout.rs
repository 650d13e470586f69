//! Dropout (`attention_dropout`, `hidden_dropout`; issue 36 item 1): every mask is a function
//! of the seed, the step and the global position, so every layout drops exactly what world size
//! 1 drops and matches the oracle to round-off in f64; and the dropout is real: it changes the
//! loss, the masks change from step to step, and what it drops is about p.

mod common;

use burn::tensor::{DType, Device};
use common::{tiny, tiny_moe, training};
use meshparity_backends::dropout::{Block, Dropout as Masks, Site};
use meshparity_backends::train::{self, Length};
use meshparity_specs::{Dropout, ModelConfig, Optimizer, Training};

const LEN: Length = Length {
    steps: 3,
    weights_after: 2,
    backward: true,
};

fn dropped(seed: u64, optimizer: Optimizer) -> Training {
    Training {
        dropout: Some(Dropout {
            attention: 0.2,
            hidden: 0.1,
        }),
        ..training(seed, optimizer)
    }
}

/// [`common::matches_oracle`] over this suite's steps.
fn check(m: &ModelConfig, t: &Training, meshes: &[&str], dtype: DType, limit: f64) {
    common::matches_oracle(m, t, meshes, (dtype, LEN), limit);
}

#[test]
fn dropout_matches_the_oracle_in_f64_on_every_layout() {
    let meshes = [
        "dp2",
        "tp2",
        "tp2-sp",
        "pp2-mb4",
        "dp2-tp2-pp2-mb2",
        "dp2-tp2-sp-pp2-mb4-gpipe",
        "cp2",
        "cp4",
        "tp2-cp2",
        "dp2-tp2-sp-cp2",
        "tp2-sp-cp2-pp2-mb2",
        "dp2-z1",
        "dp2-tp2-z2-mb2",
        "dp4-z3",
    ];
    check(
        &tiny(),
        &dropped(11, Optimizer::Sgd),
        &meshes,
        DType::F64,
        1e-12,
    );
    let smoothed = Training {
        label_smoothing: Some(0.1),
        z_loss: Some(1e-3),
        ..dropped(5, Optimizer::Adamw)
    };
    let padded = ModelConfig {
        vocab: 61,
        ..tiny()
    };
    let meshes = ["tp2-sp-cp2-pp2-mb2", "dp2-tp2-pp2-mb2"];
    check(&padded, &smoothed, &meshes, DType::F64, 1e-12);
}

#[test]
fn moe_dropout_matches_the_oracle_in_f64() {
    let meshes = [
        "tp2-sp",
        "cp2",
        "dp2-ep2",
        "dp2-tp2-sp-ep2-etp2",
        "dp2-cp2-ep2",
        "dp2-ep2-pp2-mb2",
    ];
    check(
        &tiny_moe(),
        &dropped(3, Optimizer::Sgd),
        &meshes,
        DType::F64,
        1e-12,
    );
}

#[test]
fn dropout_matches_the_oracle_in_f32_with_adamw() {
    let meshes = ["tp2-sp", "dp2-tp2-pp2-mb2", "dp2-tp2-sp-cp2"];
    check(
        &tiny(),
        &dropped(17, Optimizer::Adamw),
        &meshes,
        DType::F32,
        1e-5,
    );
}

/// Not vacuous: dropout changes the loss of every step, and a later step's masks are not the
/// first's.
#[test]
fn dropout_changes_what_is_computed() {
    let dev = Device::flex();
    let m = tiny();
    let plain = train::oracle(&m, &training(11, Optimizer::Sgd), LEN, &dev, DType::F64);
    let with = train::oracle(&m, &dropped(11, Optimizer::Sgd), LEN, &dev, DType::F64);
    for (a, b) in plain.losses.iter().zip(&with.losses) {
        assert!(((a - b) / a).abs() > 1e-3, "dropout left the loss at {a}");
    }
    let t = dropped(11, Optimizer::Sgd);
    let all: Vec<usize> = (0..8).collect();
    let every = [all.clone()];
    let block = Block {
        rows: &all,
        heads: &[],
        queries: &every,
        keys: &every,
    };
    let at = |step| {
        Masks::of(&t, step)
            .unwrap()
            .mask(Site::AttnResidual, 0, &block, 0)
    };
    assert_ne!(at(0), at(1));
    let kept = at(0).iter().filter(|&&k| k > 0.0).count() as f64 / 512.0;
    assert!((kept - 0.9).abs() < 0.05, "{kept}");
}
