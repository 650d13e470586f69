//! A training run on a mesh: every rank's parameters and optimizer, a step of the mesh's
//! executor at a time, sharded (ZeRO) or not, recording what the check levels compare.

use std::collections::BTreeMap;

use burn::tensor::{DType, Device};
use meshparity_engine::heap;
use meshparity_specs::{MeshConfig, ModelConfig, Training};

use super::ranks::Ranks;
use super::state::{self, host_ranks};
use super::{
    batch, logits_host, seed_checkpoint, update_bias, Length, Record, Replay, Routing, RunError,
};
use crate::host::{HostTensor, Param};
use crate::parallel::fault::Policies;
use crate::parallel::zero::Sharded;
use crate::parallel::{trace, Comm, Fault, MeshExec, RouteRecord, Topology};
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

impl<'s> Span<'s> {
    pub fn new(
        len: Length,
        start: Start<'s>,
        steps: std::ops::Range<usize>,
        save: bool,
        keep: &'s [u32],
    ) -> Self {
        Span {
            len,
            start,
            steps,
            save,
            keep,
        }
    }

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
        .ok_or(RunError::NoSteps)
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
    supported(model, mesh)?;
    let plan = ShardingPlan::llama(model, mesh);
    let topo = Topology::new(mesh);
    // The run's mutation, decided once for every site it touches.
    let policies = Policies::of(probe.fault, &topo);
    let per_dp = policies.data.init_seeded_per_dp_rank;
    let (params, restored, cursor) = match span.start {
        Start::Seed => {
            let params = seed_params(&plan, model, training.seed, per_dp, device, dtype);
            (params, None, state::Cursor::default())
        }
        Start::State(ranks) => state::restore(ranks, device, dtype)?,
    };
    let mut ranks = Ranks::new(params, training, Sharded::of(&topo));
    if let Some(states) = restored {
        ranks.restore(states);
    }
    let exec = MeshExec {
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
    let mut comm = Comm::new(policies);
    if per_dp {
        comm.event("init", "initial weights drawn per dp rank");
    }
    let mut run = Steps {
        exec,
        comm,
        ranks,
        cursor,
        training,
        gathered: Gathered::default(),
    };
    for step in span.steps.clone() {
        if !run.step(step, &span, probe)? {
            break;
        }
    }
    let state = span.save.then(|| run.ranks.host_state(run.cursor));
    Ok(Segment {
        record: run.gathered.record(&run.comm),
        state,
    })
}

/// Expert axes above 1 need a model with experts.
fn supported(model: &ModelConfig, mesh: &MeshConfig) -> Result<(), RunError> {
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
    Ok(())
}

/// Every rank's parameters from the seed checkpoint (each data-parallel rank's own draw under
/// `per_dp`: [`init_per_dp_rank`]).
fn seed_params(
    plan: &ShardingPlan,
    model: &ModelConfig,
    seed: u64,
    per_dp: bool,
    device: &Device,
    dtype: DType,
) -> Vec<indexmap::IndexMap<String, burn::tensor::Tensor<2>>> {
    let shards = if per_dp {
        init_per_dp_rank(plan, model, seed, device, dtype)
    } else {
        plan.shard(&seed_checkpoint(model, seed, device, dtype))
    };
    shards
        .iter()
        .map(|shards| {
            shards
                .iter()
                .map(|(n, t)| (n.clone(), t.to_param(device)))
                .collect()
        })
        .collect()
}

/// A segment's training state between steps.
struct Steps<'a> {
    exec: MeshExec<'a>,
    comm: Comm,
    ranks: Ranks<'a>,
    cursor: state::Cursor,
    training: &'a Training,
    gathered: Gathered,
}

impl Steps<'_> {
    /// Step `step`: its forward, and its backward and update where the run needs them;
    /// `false` when the segment ends here (a forward-only step).
    fn step(&mut self, step: usize, span: &Span<'_>, probe: Probe) -> Result<bool, RunError> {
        let (len, model, training) = (span.len, self.exec.model, self.training);
        let traced_step = probe.trace && step < trace::STEPS;
        self.exec.dropout = crate::dropout::Dropout::of(training, self.cursor.rng as usize);
        self.comm.set_tracing(traced_step);
        self.before_step(step);
        // A traced step keeps its backward: localization compares the backward's sites too.
        self.exec.backward = len.backward_at(step) || (len.backward && traced_step);
        let base = heap::live();
        heap::reset_peak();
        let global = batch(model, training, self.cursor.data as usize);
        let out = self.exec.step(
            &mut self.comm,
            &self.ranks.params,
            &global,
            probe.replay.and_then(|r| r.get(step)).map(Vec::as_slice),
        )?;
        let g = &mut self.gathered;
        g.inputs
            .insert(step as u64 + 1, rank_rows(&self.exec.topo, &global));
        g.trace.extend(trace::merge(step, self.comm.take_records()));
        g.losses.push(out.loss);
        if let (Some(peak), Some(base)) = (heap::peak(), base) {
            let grew = peak.saturating_sub(base);
            g.activation_bytes = Some(g.activation_bytes.unwrap_or(0).max(grew));
        }
        if model.family.has_experts() {
            g.load_balance.push(out.load_balance);
            if step == 0 {
                g.microbatch = Some(microbatches(training.batch as usize, &out.routing));
                g.routing = assemble_routing(model, training.batch as usize, out.routing);
            }
        }
        self.cursor.data += 1;
        self.cursor.rng += 1;
        if g.first.is_none() {
            let whole = self.ranks.whole(&out.grads, self.exec.backward);
            g.first = Some((
                logits_host(out.logits),
                host_ranks(&self.ranks.params, &whole),
                out.grad_norms.clone(),
            ));
        }
        if !self.exec.backward {
            // This step's forward was all that was asked (the first step's forward level, or
            // the last step's loss): no gradients, no update.
            return Ok(false);
        }
        let norm = *out.grad_norms.last().expect("a backward step has norms");
        self.gathered.grad_norms.push(norm);
        self.update(step, span, traced_step, &out.grads, &out.loads);
        Ok(true)
    }

    /// What precedes a step's forward: the parameters unsharded (ZeRO-3) and traced, the
    /// scheduler's extra steps of its catalogued bug, the learning rate each rank will use.
    fn before_step(&mut self, step: usize) {
        let (comm, ranks) = (&mut self.comm, &mut self.ranks);
        let first_stale = self.gathered.unsharded_stale.is_none();
        let stale = ranks.unshard(comm, step, first_stale);
        self.gathered.unsharded_stale = self.gathered.unsharded_stale.take().or(stale);
        self.exec.trace_params(comm, &ranks.params);
        // The catalogued bug: the scheduler stepped after every microbatch's backward, before
        // the update.
        let extra = comm.policies().optimizer.schedule_extra_steps;
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
    }

    /// The update after step `step`'s backward, and what the levels record of it.
    fn update(
        &mut self,
        step: usize,
        span: &Span<'_>,
        traced_step: bool,
        grads: &crate::parallel::zero::Ranks,
        loads: &[std::collections::BTreeMap<u32, Vec<f64>>],
    ) {
        let (len, cursor) = (span.len, self.cursor);
        let (ranks, comm, g) = (&mut self.ranks, &mut self.comm, &mut self.gathered);
        // The oracle's last update is recorded as the optimizer takes it, for the judge to
        // replay with world size 1's optimizer: the state before, the gradients, the state after.
        let replayed = (step + 1 == len.weights_after).then(|| {
            let whole = ranks.whole(grads, true);
            (ranks.host_state(cursor), host_ranks(&ranks.params, &whole))
        });
        let held = ranks.update(comm, grads);
        // Each rank moves its own copy of the bias by the all-reduced load.
        for (p, load) in held.iter_mut().zip(loads) {
            for (&layer, counts) in load {
                update_bias(p, layer, counts);
            }
        }
        if let Some(moments) = traced_step.then(|| ranks.moments()).flatten() {
            // The optimizer's state after the update: where a wrong state shows, a step
            // before the parameters it moves would (and measurably in bf16, where one
            // update moves a parameter by less than its round-off).
            self.exec.trace_moments(comm, &moments);
            g.trace.extend(trace::merge(step, comm.take_records()));
        }
        if step + 1 == len.weights_after {
            g.weights = Some(ranks.weights());
        }
        let done = step as u32 + 1;
        if let Some((before, grads)) = replayed {
            g.optimizer_step = Some(super::OptimizerStep {
                step: u64::from(done),
                grads,
                before,
                after: ranks.host_state(cursor),
            });
        }
        if span.keep.contains(&done) {
            g.states.push((done, ranks.host_state(cursor)));
        }
    }
}

/// What a segment's steps gather for its record.
#[derive(Default)]
struct Gathered {
    trace: Vec<trace::Entry>,
    load_balance: Vec<f64>,
    routing: Vec<Routing>,
    microbatch: Option<Vec<usize>>,
    losses: Vec<f64>,
    grad_norms: Vec<f64>,
    /// The first step's logits, gradients and per-rank norms.
    first: Option<(HostTensor, Vec<Shards>, Vec<f64>)>,
    weights: Option<Vec<Shards>>,
    optimizer_step: Option<super::OptimizerStep>,
    states: Vec<(u32, Vec<Shards>)>,
    /// The most a step's heap grew over what it started with: its activations, gradients and
    /// temporaries at their peak (measured where the process counts: a worker's one job).
    activation_bytes: Option<usize>,
    /// The first step whose unsharded parameters were not the all-gather of the shards.
    unsharded_stale: Option<String>,
    inputs: super::Inputs,
}

impl Gathered {
    /// The record of the steps gathered (`None` when none trained), with `comm`'s account of
    /// the collectives.
    fn record(self, comm: &Comm) -> Option<Record> {
        let (logits, grads, rank_norms) = self.first?;
        Some(Record {
            logits,
            losses: self.losses,
            load_balance: self.load_balance,
            routing: self.routing,
            microbatch: self.microbatch,
            replay: Vec::new(),
            grads,
            grad_norms: self.grad_norms,
            rank_norms,
            weights: self.weights,
            collectives: comm.calls().len(),
            altered: comm
                .altered()
                .map(|c| format!("{}: {}", c.site, c.altered.unwrap_or("")))
                .collect(),
            anomalies: comm.anomalies.clone(),
            divergent: comm.divergent.clone(),
            trace: self.trace,
            unsharded_stale: self.unsharded_stale,
            activation_bytes: self.activation_bytes.map(|b| b as u64),
            states: self.states,
            optimizer_step: self.optimizer_step,
            inputs: self.inputs,
        })
    }
}

/// The rows of `global` each rank takes its share of: its data-parallel replica's (every rank
/// of a replica — its TP, CP and PP ranks — trains on the same rows).
fn rank_rows(topo: &Topology, global: &crate::data::Batch) -> BTreeMap<u64, Vec<String>> {
    let rows = global.batch / topo.dp().max(1);
    (0..topo.world())
        .map(|r| (r as u64, global.row_digests(topo.coord(r).dp * rows, rows)))
        .collect()
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
