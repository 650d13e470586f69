//! A training step of a mesh: the executor's view of the mesh ([`MeshExec`]), to which each
//! file adds its methods, and the scalar helpers they share.
//!
//! - `step.rs` — one training step: DP replicas, then gradient finalization and the norm;
//! - `pipeline.rs` — one replica's stages over its microbatches, tick by tick;
//! - `tally.rs` — what a replica's actions have produced so far;
//! - `last_stage.rs` — the last stage's losses and logits, and the TP group's agreement on them;
//! - `schedule.rs` — GPipe and 1F1B orders and their clocked simulation;
//! - `finalize.rs` — gradient finalization: the TP, DP and expert-DP reductions;
//! - `grad_trace.rs` — traces of the gradients and parameters, per sharding rule;
//! - `sharded.rs` — finalization on a sharded mesh: when the reduce-scatter acts (ZeRO-1/2/3);
//! - `clip.rs` — the global gradient norm over every shard, and clipping by it.

pub mod clip;
mod finalize;
mod grad_trace;
mod last_stage;
mod pipeline;
mod replica;
pub mod schedule;
mod sharded;
mod step;
mod tally;

pub use step::StepOutput;

use burn::tensor::{DType, Device, Tensor, TensorData};

pub(crate) use crate::host::count_dtype;
use meshparity_specs::ModelConfig;

use crate::parallel::topology::Topology;

/// A mesh as the step executor sees it.
pub struct MeshExec<'a> {
    pub model: &'a ModelConfig,
    /// The mesh's rank groups: every group a step reduces over comes from here.
    pub topo: Topology,
    pub device: &'a Device,
    pub dtype: DType,
    /// Whether a step runs its backward pass and gradient finalization. Without (a run whose
    /// levels read only the first step's forward: a mutation run's first stage), a step is the
    /// pipeline's forward actions alone and yields no gradients.
    pub backward: bool,
    /// `[run] clip_grad_norm`: the largest global gradient norm a step keeps.
    pub clip_grad_norm: Option<f64>,
    /// `[run] label_smoothing` and `z_loss` (0: none).
    pub loss: crate::llama::LossTerms,
    /// The current step's dropout, `None` where the run drops nothing.
    pub dropout: Option<crate::dropout::Dropout>,
    /// `[run] recompute`.
    pub recompute: Option<meshparity_specs::Recompute>,
}

/// A one-element tensor for token counts and reported losses: f64 where the device has it;
/// else the widest float it has (WGSL and GLSL kernels have no f64), where token counts below
/// 2^24 stay exact.
fn f64_tensor(v: f64, device: &Device) -> Tensor<1> {
    Tensor::<1>::from_data(TensorData::new(vec![v], [1]), (device, count_dtype(device)))
}

/// The value of a one-element tensor.
pub fn scalar<const D: usize>(t: Tensor<D>) -> f64 {
    t.into_data()
        .convert::<f64>()
        .try_to_vec::<f64>()
        .expect("float data")[0]
}
