//! Training runs, on the oracle or on a mesh, recording what the check levels compare: the
//! first step's logits and loss, every step's loss, the first step's gradients, and the weights
//! after k steps. Both sides start from the same seed checkpoint, see the same batches and run
//! the same optimizer code.

use burn::tensor::{DType, Device, Tensor};
use indexmap::IndexMap;
use meshparity_specs::{MeshConfig, ModelConfig, Training};

use crate::data::Batch;
use crate::host::{HostTensor, Param};
use crate::llama::{forward, is_buffer, specs, Params};
use crate::optim::Optimizer;
use crate::parallel::{
    clip, exec::scalar, trace, Comm, Fault, MeshExec, RouteRecord, StepOutput, Topology,
};
use crate::sharding::{ShardingPlan, Shards};
pub use meshparity_engine::replay::Decided;

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
    /// Per-site traces of the first [`trace::STEPS`] steps, when asked for.
    pub trace: Vec<trace::Entry>,
}

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
    #[error("{0}")]
    Engine(String),
}

/// The seed checkpoint every run starts from.
pub fn seed_checkpoint(model: &ModelConfig, seed: u64, device: &Device, dtype: DType) -> Shards {
    let p = Params::init(model, seed, device, dtype);
    to_host(model, &p.tensors)
}

/// `tensors` as host shards in checkpoint order (gradients have none for buffers).
fn to_host(model: &ModelConfig, tensors: &IndexMap<String, Tensor<2>>) -> Shards {
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
        training.batch as usize,
        model.seq_len as usize,
        model.vocab as usize,
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
    for step in 0..len.steps {
        let b = batch(model, training, step);
        let leaves = Params {
            tensors: params.clone(),
        }
        .require_grad();
        let f = forward(model, &leaves, &b, device);
        let ce = f.loss_sum / b.counted() as f64;
        let loss = match &f.aux {
            Some(aux) => {
                load_balance.push(scalar(aux.load_balance.clone().inner()));
                replay.push(aux.routing.iter().map(|r| r.decided.clone()).collect());
                if routing.is_empty() {
                    routing = aux
                        .routing
                        .iter()
                        .map(|r| Routing {
                            scores: r.selected.clone(),
                            choices: r.decided.choices.clone(),
                        })
                        .collect();
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
        let g = loss.backward();
        let mut grads: IndexMap<String, Tensor<2>> = leaves
            .tensors
            .iter()
            .filter(|(n, _)| !is_buffer(n))
            .map(|(n, t)| {
                (
                    n.clone(),
                    t.grad(&g).unwrap_or_else(|| t.clone().inner().zeros_like()),
                )
            })
            .collect();
        losses.push(scalar(ce.inner()));
        let norm = clip::global_norm(&grads);
        clip::apply(&mut grads, norm, training.clip_grad_norm);
        grad_norms.push(norm);
        if rec.is_none() {
            rec = Some(Record {
                logits: logits_host(f.logits.inner()),
                losses: Vec::new(),
                load_balance: Vec::new(),
                routing: Vec::new(),
                microbatch: None,
                replay: Vec::new(),
                grads: vec![to_host(model, &grads)],
                grad_norms: Vec::new(),
                rank_norms: vec![norm],
                weights: None,
                collectives: 0,
                altered: Vec::new(),
                anomalies: Vec::new(),
                trace: Vec::new(),
            });
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
    }
    let mut rec = rec.expect("a run has at least one step");
    rec.losses = losses;
    rec.grad_norms = grad_norms;
    rec.load_balance = load_balance;
    rec.routing = routing;
    rec.replay = replay;
    rec.weights = weights;
    rec
}

/// What a mesh run injects, replays and records beyond its artifacts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Probe<'a> {
    pub fault: Option<Fault>,
    /// Record per-site traces ([`trace`]) of the first steps.
    pub trace: bool,
    /// The reference's routing, replayed (moe): a round-off tie flip cannot change which
    /// experts a token reaches, while the routing level still compares the mesh's own top-k.
    pub replay: Option<&'a Replay>,
}

/// The same run on a mesh, with an optional fault injected.
pub fn mesh(
    model: &ModelConfig,
    mesh: &MeshConfig,
    training: &Training,
    len: Length,
    probe: Probe,
    device: &Device,
    dtype: DType,
) -> Result<Record, RunError> {
    let fault = probe.fault;
    for (what, n) in [
        ("expert parallelism (ep)", mesh.ep),
        ("expert tensor parallelism (etp)", mesh.etp),
    ] {
        if n > 1 && !model.family.has_experts() {
            return Err(RunError::Unsupported(format!(
                "{what} > 1 for the llama family"
            )));
        }
    }
    let plan = ShardingPlan::llama(model, mesh);
    let seed = seed_checkpoint(model, training.seed, device, dtype);
    let mut params: Vec<IndexMap<String, Tensor<2>>> = plan
        .shard(&seed)
        .iter()
        .map(|shards| {
            shards
                .iter()
                .map(|(n, t)| (n.clone(), t.to_param(device)))
                .collect()
        })
        .collect();
    let mut opts: Vec<Optimizer> = params.iter().map(|_| Optimizer::new(training)).collect();
    let mut exec = MeshExec {
        model,
        topo: Topology::new(mesh),
        device,
        dtype,
        backward: len.backward,
        clip_grad_norm: training.clip_grad_norm,
    };
    let mut comm = Comm::new(fault);
    let mut traced = Vec::new();
    let (mut load_balance, mut routing, mut microbatch) = (Vec::new(), Vec::new(), None);
    let mut losses = Vec::with_capacity(len.steps);
    let mut grad_norms = Vec::new();
    let mut first: Option<(HostTensor, Vec<Shards>, Vec<f64>)> = None;
    let mut weights = None;
    for step in 0..len.steps {
        let traced_step = probe.trace && step < trace::STEPS;
        comm.set_tracing(traced_step);
        // A traced step keeps its backward: localization compares the backward's sites too.
        exec.backward = len.backward_at(step) || (len.backward && traced_step);
        let StepOutput {
            loss,
            logits,
            grads,
            grad_norms: rank_norms,
            load_balance: lb,
            routing: routed,
            loads,
        } = exec
            .step(
                &mut comm,
                &params,
                &batch(model, training, step),
                probe.replay.and_then(|r| r.get(step)).map(Vec::as_slice),
            )
            .map_err(RunError::Engine)?;
        traced.extend(trace::merge(step, comm.take_records()));
        losses.push(loss);
        if model.family.has_experts() {
            load_balance.push(lb);
            if step == 0 {
                microbatch = Some(microbatches(training.batch as usize, &routed));
                routing = assemble_routing(model, training.batch as usize, routed);
            }
        }
        if first.is_none() {
            first = Some((
                logits_host(logits),
                host_ranks(&params, &grads),
                rank_norms.clone(),
            ));
        }
        if !exec.backward {
            // This step's forward was all that was asked (the first step's forward level, or
            // the last step's loss): no gradients, no update.
            break;
        }
        grad_norms.push(*rank_norms.last().expect("a backward step has norms"));
        for ((p, g), opt) in params.iter_mut().zip(&grads).zip(&mut opts) {
            opt.step(p, g);
        }
        // Each rank moves its own copy of the bias by the all-reduced load.
        for (p, load) in params.iter_mut().zip(&loads) {
            for (&layer, counts) in load {
                update_bias(p, layer, counts);
            }
        }
        if step + 1 == len.weights_after {
            let held: Vec<_> = params
                .iter()
                .zip(&opts)
                .map(|(p, o)| o.weights(p))
                .collect();
            weights = Some(host_ranks(&params, &held));
        }
    }
    let (logits, grads, rank_norms) = first.expect("a run has at least one step");
    Ok(Record {
        logits,
        losses,
        load_balance,
        routing,
        microbatch,
        replay: Vec::new(),
        grads,
        grad_norms,
        rank_norms,
        weights,
        collectives: comm.calls().len(),
        altered: comm
            .altered()
            .map(|c| format!("{}: {}", c.site, c.altered.unwrap_or("")))
            .collect(),
        anomalies: comm.anomalies.clone(),
        trace: traced,
    })
}

/// Tokens routed to each expert over a batch's real tokens (the score-correction bias's load).
fn load(model: &ModelConfig, b: &Batch, choices: &[crate::llama::moe::Choice]) -> Vec<f64> {
    let positions: Vec<usize> = (0..b.seq_len).collect();
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

/// Each row's microbatch, numbered by the microbatches' first global rows (replica by replica,
/// microbatch by microbatch): rows a record covers belong to its microbatch.
fn microbatches(rows: usize, records: &[(usize, RouteRecord)]) -> Vec<usize> {
    let mut firsts: Vec<(usize, usize)> = records.iter().map(|(f, r)| (*f, r.rows)).collect();
    firsts.sort_unstable();
    firsts.dedup();
    let mut out = vec![0; rows];
    for (m, (first, n)) in firsts.into_iter().enumerate() {
        for row in out.iter_mut().skip(first).take(n) {
            *row = m;
        }
    }
    out
}

/// The ranks' routing records as one [B·S] table per layer.
fn assemble_routing(
    model: &ModelConfig,
    rows: usize,
    records: Vec<(usize, RouteRecord)>,
) -> Vec<Routing> {
    let (s, e) = (model.seq_len as usize, model.experts.unwrap_or(1) as usize);
    let mut out: Vec<Routing> = (0..model.layers)
        .map(|_| Routing {
            scores: vec![0.0; rows * s * e],
            choices: vec![Vec::new(); rows * s],
        })
        .collect();
    for (first, r) in records {
        let layer = &mut out[r.layer as usize];
        let n = r.positions.len();
        for row in 0..r.rows {
            for (j, &p) in r.positions.iter().enumerate() {
                let (tok, at) = ((first + row) * s + p, row * n + j);
                layer.scores[tok * e..(tok + 1) * e]
                    .copy_from_slice(&r.scores[at * e..(at + 1) * e]);
                layer.choices[tok] = r.choices[at].clone();
            }
        }
    }
    out
}

/// Per-rank tensors as host shards, with the logical shapes of the rank's parameters.
fn host_ranks(
    params: &[IndexMap<String, Tensor<2>>],
    tensors: &[IndexMap<String, Tensor<2>>],
) -> Vec<Shards> {
    params
        .iter()
        .zip(tensors)
        .map(|(p, ts)| {
            ts.iter()
                .map(|(n, t)| {
                    let dims = p[n].dims();
                    // Norm weights are [1, n] parameters with logical shape [n].
                    let shape = if n.contains("norm") || is_buffer(n) {
                        vec![dims[1]]
                    } else {
                        dims.to_vec()
                    };
                    (n.clone(), HostTensor::from_param(t, &shape))
                })
                .collect()
        })
        .collect()
}

fn logits_host(logits: Tensor<3>) -> HostTensor {
    let dims = logits.dims();
    let data = logits.into_data();
    HostTensor {
        dtype: crate::host::tensor_dtype(data.dtype()),
        shape: dims.to_vec(),
        bytes: data.as_bytes().to_vec(),
    }
}
