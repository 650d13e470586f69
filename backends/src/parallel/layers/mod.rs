//! One pipeline stage's layers on its stage group, for one microbatch.
//!
//! - `ctx.rs` — what a stage knows about itself (`StageCtx`), below every layer file;
//! - `stage.rs` — the stage: embedding, its layers, the TP MLP, the faults that hit a layer;
//! - `layer.rs` — one layer's attention and MLP blocks, the spans recompute re-runs;
//! - `head.rs` — the last stage's vocab-parallel output and cross-entropy;
//! - `mtp.rs` — the last stage's multi-token prediction layer;
//! - `ring.rs` — attention on whole sequences or around the CP ring (online softmax);
//! - `rng.rs` — the ranks' random streams: which block of dropout's mask each rank draws;
//! - `experts.rs` — the moe family's routed MLP on a stage's ranks;
//! - `router.rs` — the router's host-side decisions: own top-k, replay, capacity drops;
//! - `dispatch.rs` — expert parallelism: tokens to their experts' ranks and back;
//! - `faulty.rs` — the computation mutations' wrong layer functions.

pub mod ctx;
mod dispatch;
pub mod experts;
mod faulty;
mod head;
mod layer;
mod mtp;
mod ring;
mod rng;
mod router;
pub mod stage;
