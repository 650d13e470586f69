//! Helpers the judge's unit tests share.

use meshparity_specs::{Optimizer, Training};

/// A training for the tests: 4 steps, the oracle's 2, lr 1e-3, every optional key unset.
pub(crate) fn training(optimizer: Optimizer, weight_decay: Option<f64>) -> Training {
    serde_json::from_value(serde_json::json!({
        "seed": 1, "steps": 4, "oracle_steps": 2, "batch": 8, "optimizer": optimizer,
        "lr": 1e-3, "weight_decay": weight_decay,
    }))
    .expect("a training")
}
