//! The `llama` model on simulated ranks: explicit collectives, segment-wise autodiff, pipeline
//! schedules and the catalogued faults.
//!
//! - `collective.rs` — the communicator: every call logged by site, faults injected there;
//! - `experts.rs` — the moe family's routed MLP on a stage's ranks;
//! - `router.rs` — the router's host-side decisions: own top-k, replay, capacity drops;
//! - `dispatch.rs` — expert parallelism: tokens to their experts' ranks and back;
//! - `finalize.rs` — gradient finalization: the TP, DP and expert-DP reductions;
//! - `clip.rs` — the global gradient norm over every shard, and clipping by it;
//! - `fault.rs` — the catalogued mutations and where each one acts;
//! - `context.rs` — context parallelism: zigzag chunks, TP × CP groups, global order;
//! - `tape.rs` — segments between collectives, backward with Megatron's conjugates;
//! - `route.rs` — rows moved between ranks (the experts' all-to-all, unequal gathers);
//! - `ring.rs` — attention on whole sequences or around the CP ring (online softmax);
//! - `stage.rs` — one pipeline stage on one TP group (TP, SP, vocab-parallel layers);
//! - `schedule.rs` — GPipe and 1F1B orders and their clocked simulation;
//! - `pipeline.rs` — one replica's stages over its microbatches, tick by tick;
//! - `step.rs` — one training step: DP replicas, gradient finalization.

pub mod clip;
pub mod collective;
pub mod context;
mod dispatch;
pub mod experts;
pub mod fault;
mod faulty;
mod finalize;
pub mod pipeline;
mod ring;
pub mod route;
mod router;
pub mod schedule;
pub mod stage;
pub mod step;
pub mod tape;
pub mod trace;

pub use collective::Comm;
pub use fault::Fault;
pub use step::{MeshExec, StepOutput};
