//! Training runs, on the oracle or on a mesh, recording what the check levels compare: the
//! first step's logits and loss, every step's loss, the first step's gradients, and the weights
//! after k steps. Both sides start from the same seed checkpoint, see the same batches and run
//! the same optimizer code. The oracle's run is here, a mesh's in `mesh.rs`.

use burn::tensor::{DType, Device, Tensor};
use indexmap::IndexMap;
use meshparity_specs::{ModelConfig, Training};

use crate::data::Batch;
use crate::dropout::Dropout;
use crate::host::{HostTensor, Param};
use crate::llama::{forward_with, is_buffer, specs, LossTerms, Params};
use crate::optim::Optimizer;
use crate::parallel::{clip, exec::scalar, trace};
use crate::sharding::Shards;
pub use meshparity_engine::replay::Decided;

mod mesh;
mod ranks;
pub mod state;

pub use mesh::{mesh, segment, Probe, Segment, Span, Start};

/// What a run records, as host tensors (per rank where ranks hold shards).
#[derive(Clone, Debug)]
pub struct Record {
    /// [B, S, V] of the first step's batch, from the seed weights.
    pub logits: HostTensor,
    /// Loss per step (the first is the forward level's): the cross-entropy.
    pub losses: Vec<f64>,
    /// The moe family's load-balance loss per step (empty for dense models).
    pub load_balance: Vec<f64>,
    /// The moe family's routing of the first step's batch, per layer (empty for dense models).
    pub routing: Vec<Routing>,
    /// A mesh run's microbatch of each row of the first step's batch (`None` for the oracle,
    /// which runs the batch whole).
    pub microbatch: Option<Vec<usize>>,
    /// The reference's top-k experts of every step, layer and token (moe), which mesh runs
    /// replay (empty for mesh runs and dense models).
    pub replay: Replay,
    /// Gradients of the first step as the optimizer sees them (clipped where the run clips),
    /// per rank (the oracle has one rank holding everything).
    pub grads: Vec<Shards>,
    /// The global gradient norm before clipping, per step that ran its backward (as the last
    /// rank computed it, where Megatron logs it).
    pub grad_norms: Vec<f64>,
    /// The first step's norm as each rank computed it (the oracle's one).
    pub rank_norms: Vec<f64>,
    /// Weights after `weights_after` steps, per rank, if the run was that long: as the optimizer
    /// holds them (f32 master weights for half-precision models).
    pub weights: Option<Vec<Shards>>,
    /// Collective calls made, and those a fault altered (site: what happened).
    pub collectives: usize,
    pub altered: Vec<String>,
    pub anomalies: Vec<String>,
    /// Values the ranks of a group must hold alike that differed ([`Comm::divergent`]).
    ///
    /// [`Comm::divergent`]: crate::parallel::comm::collective::Comm::divergent
    pub divergent: Vec<String>,
    /// Per-site traces of the first [`trace::STEPS`] steps, when asked for.
    pub trace: Vec<trace::Entry>,
    /// On a ZeRO-3 mesh, why the parameters a step computed with were not its shards'
    /// all-gather (an unshard that did not happen): the trained weights' replicas disagree.
    pub unsharded_stale: Option<String>,
    /// A mesh run's most heap growth in a step over the heap it started with: activations
    /// held for backward, gradients and temporaries at the step's peak. Measured where the
    /// process counts its heap (`meshparity_engine::heap`: a worker's one job); `None` elsewhere
    /// and for the oracle.
    pub activation_bytes: Option<u64>,
    /// The whole training state after each step asked for (the oracle: its training's
    /// `states_at`; a mesh run: its span's `keep`), per rank, as a checkpoint holds it.
    pub states: Vec<(u32, Vec<Shards>)>,
    /// A mesh run's last oracle step as its optimizer took it (`None` for the oracle).
    pub optimizer_step: Option<OptimizerStep>,
    /// The rows each rank took at each step, as digests (the oracle: one rank, every row).
    pub inputs: Inputs,
}

/// One update as a mesh's optimizers took it, per rank: what the oracle level replays with
/// world size 1's optimizer (`meshparity_judge::optimizer_step`).
#[derive(Clone, Debug)]
pub struct OptimizerStep {
    /// The update's number, 1-based.
    pub step: u64,
    /// The gradients each rank's optimizer took, whole (gathered from a ZeRO mesh's shards).
    pub grads: Vec<Shards>,
    /// Each rank's training state before and after the update, as a checkpoint holds it.
    pub before: Vec<Shards>,
    pub after: Vec<Shards>,
}

pub use meshparity_engine::inputs::Inputs;
pub use meshparity_engine::Length;

/// Every step's and layer's routing of the global batch (tokens row-major [B·S]).
pub type Replay = Vec<Vec<Decided>>;

/// One layer's routing of a batch, tokens in row-major [B·S] order.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    /// What top-k selected by (router scores plus the score-correction bias), [B·S, E].
    pub scores: Vec<f64>,
    /// Each token's top-k experts, best first, [B·S, k].
    pub choices: Vec<Vec<usize>>,
}

/// Why a mesh run could not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the burn backend does not simulate {0} yet")]
    Unsupported(String),
    #[error(transparent)]
    Schedule(#[from] crate::parallel::schedule::ScheduleError),
    #[error("a run has at least one step")]
    NoSteps,
    #[error("a resumed run trains its first mesh")]
    ResumeUntrained,
    #[error("loading rank {rank}'s state: {source}")]
    State {
        rank: usize,
        source: state::StateError,
    },
    /// The checkpoint a resumed run saved, or loads.
    #[error("{action} the checkpoint: {source}")]
    Checkpoint {
        action: &'static str,
        source: meshparity_engine::sharded::ShardedError,
    },
    #[error(
        "loading the checkpoint: it holds no `{0}` (a checkpoint must hold every parameter and buffer)"
    )]
    Missing(String),
}

/// The seed checkpoint every run starts from.
pub fn seed_checkpoint(model: &ModelConfig, seed: u64, device: &Device, dtype: DType) -> Shards {
    let p = Params::init(model, seed, device, dtype);
    to_host(model, &p.tensors)
}

/// `tensors` as host shards in checkpoint order (gradients have none for buffers).
pub(crate) fn to_host(model: &ModelConfig, tensors: &IndexMap<String, Tensor<2>>) -> Shards {
    specs(model)
        .into_iter()
        .filter_map(|s| {
            let t = HostTensor::from_param(tensors.get(&s.name)?, &s.shape);
            Some((s.name, t))
        })
        .collect()
}

/// The global batch of training step `step`.
pub fn batch(model: &ModelConfig, training: &Training, step: usize) -> Batch {
    Batch::synthetic(
        training.seed,
        step as u64,
        (
            training.batch as usize,
            model.seq_len as usize,
            model.vocab as usize,
        ),
        training.packing,
    )
}

/// The single-device run.
pub fn oracle(
    model: &ModelConfig,
    training: &Training,
    len: Length,
    device: &Device,
    dtype: DType,
) -> Record {
    let mut params = Params::init(model, training.seed, device, dtype).tensors;
    let mut opt = Optimizer::new(training);
    let mut rec = None::<Record>;
    let mut losses = Vec::with_capacity(len.steps);
    let (mut load_balance, mut routing, mut replay) = (Vec::new(), Vec::new(), Vec::new());
    let mut grad_norms = Vec::new();
    let mut weights = None;
    let mut states = Vec::new();
    let mut inputs = Inputs::new();
    for step in 0..len.steps {
        let b = batch(model, training, step);
        let rows = [(0, b.row_digests(0, b.batch))].into_iter().collect();
        inputs.insert(step as u64 + 1, rows);
        let leaves = Params {
            tensors: params.clone(),
        }
        .require_grad();
        let dropout = Dropout::of(training, step);
        let f = forward_with(
            model,
            &leaves,
            &b,
            device,
            LossTerms::of(training),
            dropout.as_ref(),
        );
        let ce = f.loss_sum / b.counted() as f64;
        let loss = match &f.aux {
            Some(aux) => {
                load_balance.push(scalar(aux.load_balance.clone().inner()));
                replay.push(aux.routing.iter().map(|r| r.decided.clone()).collect());
                if routing.is_empty() {
                    routing = first_routing(aux);
                }
                ce.clone() + aux.load_balance.clone() + aux.z.clone()
            }
            None => ce.clone(),
        };
        if step > 0 && !len.backward_at(step) {
            // The last step's loss is all a run reads of it ([`Length::backward_at`]).
            losses.push(scalar(ce.inner()));
            break;
        }
        let mut grads = parameter_grads(&leaves, &loss.backward());
        losses.push(scalar(ce.inner()));
        let norm = clip::global_norm(&grads);
        clip::apply(&mut grads, norm, training.clip_grad_norm);
        grad_norms.push(norm);
        if rec.is_none() {
            let (logits, grads) = (logits_host(f.logits.inner()), to_host(model, &grads));
            rec = Some(Record::first_step(logits, vec![grads], vec![norm]));
        }
        opt.step(&mut params, &grads);
        if let Some(aux) = f.aux.as_ref().filter(|_| model.moe.expert_bias()) {
            for (l, r) in aux.routing.iter().enumerate() {
                update_bias(&mut params, l as u32, &load(model, &b, &r.decided.choices));
            }
        }
        if step + 1 == len.weights_after {
            weights = Some(vec![to_host(model, &opt.weights(&params))]);
        }
        let done = step as u32 + 1;
        if training.states_at.contains(&done) {
            states.push((done, vec![oracle_state(&opt, &params, done)]));
        }
    }
    let mut rec = rec.expect("a run has at least one step");
    rec.losses = losses;
    rec.grad_norms = grad_norms;
    rec.load_balance = load_balance;
    rec.routing = routing;
    rec.replay = replay;
    rec.weights = weights;
    rec.states = states;
    rec.inputs = inputs;
    rec
}

/// Every parameter's gradient in `g` (zeros for one the loss does not reach); buffers have
/// none.
fn parameter_grads(leaves: &Params, g: &burn::tensor::Gradients) -> IndexMap<String, Tensor<2>> {
    leaves
        .tensors
        .iter()
        .filter(|(n, _)| !is_buffer(n))
        .map(|(n, t)| {
            (
                n.clone(),
                t.grad(g).unwrap_or_else(|| t.clone().inner().zeros_like()),
            )
        })
        .collect()
}

/// The routing of a moe model's first step, per layer: the selected experts' scores and the
/// choices.
fn first_routing(aux: &crate::llama::model::Aux) -> Vec<Routing> {
    aux.routing
        .iter()
        .map(|r| Routing {
            scores: r.selected.clone(),
            choices: r.decided.choices.clone(),
        })
        .collect()
}

impl Record {
    /// The record of a run's first step (its logits, gradients and per-rank norms), every
    /// later and mesh-only field empty.
    pub(crate) fn first_step(logits: HostTensor, grads: Vec<Shards>, rank_norms: Vec<f64>) -> Self {
        Record {
            logits,
            losses: Vec::new(),
            load_balance: Vec::new(),
            routing: Vec::new(),
            microbatch: None,
            replay: Vec::new(),
            grads,
            grad_norms: Vec::new(),
            rank_norms,
            weights: None,
            collectives: 0,
            altered: Vec::new(),
            anomalies: Vec::new(),
            divergent: Vec::new(),
            trace: Vec::new(),
            unsharded_stale: None,
            activation_bytes: None,
            states: Vec::new(),
            optimizer_step: None,
            inputs: Inputs::new(),
        }
    }
}

/// The oracle's state after `done` updates, as a world-size-1 checkpoint holds it.
fn oracle_state(opt: &Optimizer, params: &IndexMap<String, Tensor<2>>, done: u32) -> Shards {
    let at = state::Cursor {
        data: u64::from(done),
        rng: u64::from(done),
    };
    let held = state::RankState {
        weights: opt.weights(params),
        opt: opt.state(),
        cursor: at,
    };
    let shape = |n: &str, t: &Tensor<2>| state::logical_shape(n, &t.dims());
    state::to_host(&held, &shape)
}

/// Tokens routed to each expert over a batch's real tokens (the score-correction bias's load).
pub(crate) fn load(
    model: &ModelConfig,
    b: &Batch,
    choices: &[crate::llama::moe::Choice],
) -> Vec<f64> {
    let positions = crate::positions::Positions::shared((0..b.seq_len).collect());
    let e = model.experts.unwrap_or(1) as usize;
    crate::llama::balance::load(choices, b.batch, &positions, &b.lengths, e)
}

/// Layer `layer`'s score-correction bias moved by its load ([`balance::update_bias`]), in the
/// bias's dtype (a rank without that layer holds no bias for it).
///
/// [`balance::update_bias`]: crate::llama::balance::update_bias
pub(crate) fn update_bias(params: &mut IndexMap<String, Tensor<2>>, layer: u32, load: &[f64]) {
    let name = format!("layers.{layer}.mlp.router.expert_bias");
    let Some(p) = params.get_mut(&name) else {
        return;
    };
    let next = crate::llama::balance::update_bias(&crate::llama::moe::values(p), load);
    let n = next.len();
    let data = burn::tensor::TensorData::new(next, [1, n]);
    *p = Tensor::<2>::from_data(data, (&p.device(), p.dtype()));
}

pub(crate) fn logits_host(logits: Tensor<3>) -> HostTensor {
    let dims = logits.dims();
    let data = logits.into_data();
    HostTensor {
        dtype: crate::host::tensor_dtype(data.dtype()),
        shape: dims.to_vec(),
        bytes: data.as_bytes().to_vec(),
    }
}
