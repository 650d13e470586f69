//! The `llama` model on simulated ranks: explicit collectives, segment-wise autodiff, pipeline
//! schedules and the catalogued faults.
//!
//! - `collective.rs` — the communicator: every call logged by site, faults injected there;
//! - `fault.rs` — the catalogued mutations and where each one acts;
//! - `tape.rs` — segments between collectives, backward with Megatron's conjugates;
//! - `stage.rs` — one pipeline stage on one TP group (TP, SP, vocab-parallel layers);
//! - `schedule.rs` — GPipe and 1F1B orders and their clocked simulation;
//! - `pipeline.rs` — one replica's stages over its microbatches, tick by tick;
//! - `step.rs` — one training step: DP replicas, gradient finalization.

pub mod collective;
pub mod fault;
mod faulty;
pub mod pipeline;
pub mod schedule;
pub mod stage;
pub mod step;
pub mod tape;
pub mod trace;

pub use collective::Comm;
pub use fault::Fault;
pub use step::{MeshExec, StepOutput};
