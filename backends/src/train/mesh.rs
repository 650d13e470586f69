//! A training run on a mesh: every rank's parameters and optimizer, a step of the mesh's
//! executor at a time, sharded (ZeRO) or not, recording what the check levels compare.

use burn::tensor::{DType, Device};
use meshparity_engine::heap;
use meshparity_specs::{MeshConfig, ModelConfig, Training};

use super::ranks::Ranks;
use super::state::{self, host_ranks};
use super::{
    batch, logits_host, seed_checkpoint, update_bias, Length, Record, Replay, Routing, RunError,
};
use crate::host::{HostTensor, Param};
use crate::parallel::zero::Sharded;
use crate::parallel::{trace, Comm, Fault, MeshExec, RouteRecord, StepOutput, Topology};
use crate::sharding::{ShardingPlan, Shards};

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

/// Where a mesh run starts.
#[derive(Clone, Copy, Debug)]
pub enum Start<'s> {
    /// The seed checkpoint, before step 0.
    Seed,
    /// A checkpoint's state split for this mesh ([`state::split`]): one host state per rank.
    State(&'s [Shards]),
}

/// Which steps a run trains, from where, and whether it keeps its state for a checkpoint.
#[derive(Clone, Debug)]
pub struct Span<'s> {
    /// The length of the whole run (a resumed run's included), which decides the steps that
    /// need their backward and when the weights are recorded.
    pub len: Length,
    pub start: Start<'s>,
    /// The steps this run trains (a resumed run: from the checkpoint's step on).
    pub steps: std::ops::Range<usize>,
    /// Keep every rank's state after the last step ([`Segment::state`]).
    pub save: bool,
    /// Record every rank's state after each of these steps ([`Record::states`]).
    pub keep: &'s [u32],
}

impl Span<'_> {
    /// The whole run from the seed.
    pub fn whole(len: Length) -> Self {
        Span {
            len,
            start: Start::Seed,
            steps: 0..len.steps,
            save: false,
            keep: &[],
        }
    }
}

/// What a run of some steps leaves: its record (`None` when it trained none) and, if asked,
/// every rank's state after its last step, as host tensors.
pub struct Segment {
    pub record: Option<Record>,
    pub state: Option<Vec<Shards>>,
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
    let span = Span::whole(len);
    segment(model, mesh, training, span, probe, device, dtype)?
        .record
        .ok_or_else(|| RunError::Engine("a run has at least one step".to_owned()))
}

/// Steps `span.steps` of a run on a mesh, from the seed or a checkpoint's state.
pub fn segment(
    model: &ModelConfig,
    mesh: &MeshConfig,
    training: &Training,
    span: Span<'_>,
    probe: Probe,
    device: &Device,
    dtype: DType,
) -> Result<Segment, RunError> {
    let len = span.len;
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
    let per_dp = mesh.dp > 1 && fault.is_some_and(|f| f.init_seeded_per_dp_rank());
    let (params, restored, mut cursor) = match span.start {
        Start::Seed => {
            let shards = if per_dp {
                init_per_dp_rank(&plan, model, training.seed, device, dtype)
            } else {
                plan.shard(&seed_checkpoint(model, training.seed, device, dtype))
            };
            let params = shards
                .iter()
                .map(|shards| {
                    shards
                        .iter()
                        .map(|(n, t)| (n.clone(), t.to_param(device)))
                        .collect()
                })
                .collect();
            (params, None, state::Cursor::default())
        }
        Start::State(ranks) => state::restore(ranks, device, dtype)?,
    };
    let topo = Topology::new(mesh);
    let mut ranks = Ranks::new(params, training, Sharded::of(&topo));
    if let Some(states) = restored {
        ranks.restore(states);
    }
    // The first step whose unsharded parameters were not the all-gather of the shards.
    let mut unsharded_stale = None;
    let mut exec = MeshExec {
        model,
        topo,
        device,
        dtype,
        backward: len.backward,
        clip_grad_norm: training.clip_grad_norm,
        loss: crate::llama::LossTerms::of(training),
        dropout: None,
        recompute: training.recompute,
    };
    let mut comm = Comm::new(fault);
    if per_dp {
        comm.event("init", "initial weights drawn per dp rank");
    }
    let mut traced = Vec::new();
    let (mut load_balance, mut routing, mut microbatch) = (Vec::new(), Vec::new(), None);
    let mut losses = Vec::with_capacity(len.steps);
    let mut grad_norms = Vec::new();
    let mut first: Option<(HostTensor, Vec<Shards>, Vec<f64>)> = None;
    let mut weights = None;
    let mut optimizer_step = None;
    let mut states = Vec::new();
    // The most a step's heap grew over what it started with: its activations, gradients and
    // temporaries at their peak (measured where the process counts: a worker's one job).
    let mut activation_bytes = None;
    for step in span.steps.clone() {
        let traced_step = probe.trace && step < trace::STEPS;
        exec.dropout = crate::dropout::Dropout::of(training, cursor.rng as usize);
        comm.set_tracing(traced_step);
        let stale = ranks.unshard(&mut comm, step, unsharded_stale.is_none());
        unsharded_stale = unsharded_stale.or(stale);
        exec.trace_params(&mut comm, &ranks.params);
        // The catalogued bug: the scheduler stepped after every microbatch's backward, before
        // the update.
        let extra = fault.map_or(0, |f| f.schedule_extra_steps(topo.microbatches()));
        if extra > 0 {
            comm.event("lr", "scheduler stepped once per microbatch");
            ranks
                .opts_mut()
                .iter_mut()
                .for_each(|o| o.advance_schedule(extra));
        }
        // The learning rate this step's update uses, as each rank's optimizer holds it.
        let rates = ranks.opts().iter().map(|o| trace::Value {
            shape: vec![1],
            data: vec![o.next_lr()],
        });
        comm.trace_values("lr", rates.collect());
        // A traced step keeps its backward: localization compares the backward's sites too.
        exec.backward = len.backward_at(step) || (len.backward && traced_step);
        let base = heap::live();
        heap::reset_peak();
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
                &ranks.params,
                &batch(model, training, cursor.data as usize),
                probe.replay.and_then(|r| r.get(step)).map(Vec::as_slice),
            )
            .map_err(RunError::Engine)?;
        traced.extend(trace::merge(step, comm.take_records()));
        losses.push(loss);
        if let (Some(peak), Some(base)) = (heap::peak(), base) {
            activation_bytes = Some(activation_bytes.unwrap_or(0).max(peak.saturating_sub(base)));
        }
        if model.family.has_experts() {
            load_balance.push(lb);
            if step == 0 {
                microbatch = Some(microbatches(training.batch as usize, &routed));
                routing = assemble_routing(model, training.batch as usize, routed);
            }
        }
        cursor.data += 1;
        cursor.rng += 1;
        if first.is_none() {
            let whole = ranks.whole(&grads, exec.backward);
            first = Some((
                logits_host(logits),
                host_ranks(&ranks.params, &whole),
                rank_norms.clone(),
            ));
        }
        if !exec.backward {
            // This step's forward was all that was asked (the first step's forward level, or
            // the last step's loss): no gradients, no update.
            break;
        }
        grad_norms.push(*rank_norms.last().expect("a backward step has norms"));
        // The oracle's last update is recorded as the optimizer takes it, for the judge to
        // replay with world size 1's optimizer: the state before, the gradients, the state after.
        let replayed = (step + 1 == len.weights_after).then(|| {
            let whole = ranks.whole(&grads, true);
            (ranks.host_state(cursor), host_ranks(&ranks.params, &whole))
        });
        let held = ranks.update(&mut comm, &grads);
        // Each rank moves its own copy of the bias by the all-reduced load.
        for (p, load) in held.iter_mut().zip(&loads) {
            for (&layer, counts) in load {
                update_bias(p, layer, counts);
            }
        }
        if let Some(moments) = traced_step.then(|| ranks.moments()).flatten() {
            // The optimizer's state after the update: where a wrong state shows, a step
            // before the parameters it moves would (and measurably in bf16, where one
            // update moves a parameter by less than its round-off).
            exec.trace_moments(&mut comm, &moments);
            traced.extend(trace::merge(step, comm.take_records()));
        }
        if step + 1 == len.weights_after {
            weights = Some(ranks.weights());
        }
        let done = step as u32 + 1;
        if let Some((before, grads)) = replayed {
            optimizer_step = Some(super::OptimizerStep {
                step: u64::from(done),
                grads,
                before,
                after: ranks.host_state(cursor),
            });
        }
        if span.keep.contains(&done) {
            states.push((done, ranks.host_state(cursor)));
        }
    }
    let state = match span.save {
        true => Some(ranks.host_state(cursor)),
        false => None,
    };
    let Some((logits, grads, rank_norms)) = first else {
        return Ok(Segment {
            record: None,
            state,
        });
    };
    let record = Record {
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
        divergent: comm.divergent.clone(),
        trace: traced,
        unsharded_stale,
        activation_bytes: activation_bytes.map(|b| b as u64),
        states,
        optimizer_step,
    };
    Ok(Segment {
        record: Some(record),
        state,
    })
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
            for (j, &p) in r.positions.row(row).iter().enumerate() {
                let (tok, at) = ((first + row) * s + p, row * n + j);
                layer.scores[tok * e..(tok + 1) * e]
                    .copy_from_slice(&r.scores[at * e..(at + 1) * e]);
                layer.choices[tok] = r.choices[at].clone();
            }
        }
    }
    out
}

/// The catalogued bug (facebookresearch/detr#544): every rank seeds its initialization with
/// `seed + rank` and nothing broadcasts rank 0's weights, so each data-parallel replica starts
/// from its own weights. Each rank holds its shards of the checkpoint drawn from `seed + dp`.
fn init_per_dp_rank(
    plan: &ShardingPlan,
    model: &ModelConfig,
    seed: u64,
    device: &Device,
    dtype: DType,
) -> Vec<Shards> {
    let dp = plan.mesh.dp as u64;
    let drawn: Vec<Vec<Shards>> = (0..dp)
        .map(|d| plan.shard(&seed_checkpoint(model, seed + d, device, dtype)))
        .collect();
    (0..plan.world_size())
        .map(|rank| drawn[plan.coord(rank).dp][rank].clone())
        .collect()
}
