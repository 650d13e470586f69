//! The `llama` family: a dense decoder (token embedding, RMSNorm, rotary embeddings,
//! grouped-query attention with causal and padding masks, SwiGLU MLP, output projection,
//! cross-entropy with ignored padding).
//!
//! - `params.rs` — names, shapes, deterministic init;
//! - `layers.rs` — each layer as a function of tensors (parallel versions will sit beside them);
//! - `moe.rs` — the `moe` family's router, routed and shared experts, auxiliary losses;
//! - `balance.rs` — capacity drops and the score-correction bias's update;
//! - `model.rs` — the single-device forward pass, the oracle.

pub mod balance;
pub mod layers;
pub mod model;
pub mod moe;
pub mod params;

pub use layers::LossTerms;
pub use model::{forward, forward_with, Forward};
pub use params::{is_buffer, mtp_layer, specs, ParamSpec, Params};
