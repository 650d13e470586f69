//! The check levels as backend jobs: the reference run writes the oracle's artifacts once per
//! model configuration; each level runs the mesh, writes the candidate's artifacts beside them
//! and judges them with the comparison engine, so every verdict can be re-derived later with
//! `meshparity compare` on the two files.
//!
//! - `reference.rs` — the oracle's artifacts;
//! - `check.rs` — roundtrip, forward, curve and oracle on a mesh;
//! - `mutation.rs` — a mesh with one fault, judged by the levels that should catch it;
//! - `outcome.rs` — what a level found, with the evidence.

pub mod check;
pub mod gate;
pub mod mutation;
pub mod outcome;
pub mod reference;
pub mod update;

use burn::tensor::Device;
use meshparity_compare::InputError;
use meshparity_specs::{DType, ModelConfig, Training};

pub use check::{check, Judged};
pub use gate::Gate;
pub use mutation::{mutation, MutationOutcome};
pub use outcome::Outcome;
pub use reference::reference;

use crate::train::RunError;

/// Artifact file names, shared by the reference and the candidates.
pub mod files {
    pub const SEED: &str = "seed.safetensors";
    pub const FORWARD: &str = "forward.safetensors";
    pub const CURVE: &str = "curve.jsonl";
    pub const GRADS: &str = "grads.safetensors";
    pub const WEIGHTS: &str = "weights.safetensors";
    /// Weights after k steps minus the seed weights, in f64 (what the oracle level compares).
    pub const UPDATES: &str = "updates.safetensors";
    pub const MERGED: &str = "merged.safetensors";
    pub const SHARDS: &str = "shards";
}

/// What every job of one model shares.
pub struct Setup<'a> {
    pub model: &'a ModelConfig,
    pub training: &'a Training,
    pub dtype: DType,
    pub device: &'a Device,
}

impl Setup<'_> {
    pub fn burn_dtype(&self) -> burn::tensor::DType {
        match self.dtype {
            DType::F64 => burn::tensor::DType::F64,
            DType::F32 => burn::tensor::DType::F32,
            DType::F16 => burn::tensor::DType::F16,
            DType::Bf16 => burn::tensor::DType::BF16,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LevelError {
    #[error("writing {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("nothing gated: {0}")]
    NothingGated(String),
    #[error("not supported by the burn backend: {0}")]
    Unsupported(String),
}

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> LevelError + '_ {
    move |source| LevelError::Io {
        path: path.display().to_string(),
        source,
    }
}
