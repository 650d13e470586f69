//! The `llama` model on simulated ranks: explicit collectives, segment-wise autodiff, pipeline
//! schedules and the catalogued faults. Split by concept, each folder depending only on those
//! listed after it (no import cycle: `structure.rs` checks):
//!
//! - `exec/` — a training step of a mesh (`MeshExec`): the replicas, the pipeline schedule and
//!   its ticks, gradient finalization and the global gradient norm;
//! - `layers/` — one pipeline stage's computation on its group (`StageCtx`): TP/SP layers,
//!   attention with the CP ring, the moe router, experts and their dispatch;
//! - `comm/` — the communicator (every collective logged by site, faults injected there), the
//!   tape's explicit backward, rows moved between ranks, and the per-site traces;
//! - `topology/` — the one owner of rank groups: which global ranks form every group, and
//!   what applies on a mesh;
//! - `zero/` — sharded data parallelism: flat shards, their reduce-scatter and all-gather;
//! - `context.rs` — how a sequence is split over the cp ranks and put back in order;
//! - `fault/` — the catalogued mutations and where each one acts, resolved once per run into
//!   `Policies` (`policy.rs`): what the communicator, the layers, the gradient finalization
//!   and the optimizer read instead of the mutation.

pub mod comm;
pub mod context;
pub mod exec;
pub mod fault;
pub mod layers;
pub mod topology;
pub mod zero;

#[cfg(test)]
mod structure;

pub use comm::collective::Comm;
pub use comm::{route, tape, trace};
pub use exec::{clip, schedule, MeshExec, StepOutput};
pub use fault::Fault;
pub use layers::experts::RouteRecord;
pub use topology::Topology;
