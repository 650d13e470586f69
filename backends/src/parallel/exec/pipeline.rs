//! One data-parallel replica's pipeline (or, under expert parallelism, every replica's in
//! lockstep): its stages run their microbatches in schedule order, passing activations forward
//! and gradients back by send/recv. The actions of one clock tick run concurrently (each stage
//! with a sub-communicator holding its mail), as the stages of a real pipeline run on their own
//! devices.

use std::collections::HashMap;
use std::ops::Range;

use burn::tensor::{Gradients, Tensor};

use super::replica::{Act, Done, Replica, StepInput};
use super::schedule::{Action, ScheduleError};
use super::tally::Tally;
use super::MeshExec;
use crate::data::Batch;
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::trace::Canon;
use crate::parallel::context;
use crate::parallel::layers::ctx::{Leaves, StageCtx};
use crate::parallel::layers::stage::StageOut;

impl MeshExec<'_> {
    /// Replicas `ds`' pipeline over their microbatches, in schedule order: the actions of one
    /// clock tick run on different stages and depend only on messages of earlier ticks, so they
    /// run concurrently, each with a sub-communicator holding its stage's mail.
    pub(super) fn replica(
        &self,
        comm: &mut Comm,
        ds: Range<usize>,
        normalizers: &[f64],
        input: StepInput<'_>,
        leaves: &[Leaves],
        ticks: &[Vec<Action>],
    ) -> Result<Replica, ScheduleError> {
        use rayon::prelude::*;
        let StepInput {
            batch,
            replay,
            per_microbatch: mb_normalizers,
        } = input;
        let mbs = self.topo.microbatches();
        let (first_rows, micro) = self.microbatches(batch, &ds);
        // Per microbatch where the reduction acts per microbatch (ZeRO), and where a traced run
        // keeps each microbatch's gradient as a part of the accumulated one (`grad_trace`).
        let per_microbatch = self.topo.zero() > 0 || (comm.tracing() && mbs > 1);
        let mut tally = Tally::new(ds.len(), mbs, per_microbatch);
        let d = ds.start;
        for tick in ticks {
            let mut work = Vec::with_capacity(tick.len());
            for &action in tick {
                let (stage, held) = match action {
                    Action::Forward { stage, .. } => (stage, None),
                    Action::Backward { stage, mb } => (
                        stage,
                        Some(
                            tally
                                .live
                                .remove(&(stage, mb))
                                .ok_or(ScheduleError::BackwardBeforeForward)?,
                        ),
                    ),
                };
                let mut sub = comm.split(&self.topo.stage(ds.clone(), stage), mbs);
                let mb = match action {
                    Action::Forward { mb, .. } | Action::Backward { mb, .. } => mb,
                };
                sub.set_block(d * mbs + mb);
                work.push((action, held, sub));
            }
            let done: Vec<Result<(Done, Comm), ScheduleError>> = work
                .into_par_iter()
                .map(|(action, held, mut sub)| {
                    let ctx = Act {
                        ds: ds.clone(),
                        sequences: batch.batch,
                        replay,
                        first_rows: first_rows.clone(),
                        normalizers,
                        per_microbatch: mb_normalizers,
                        micro: &micro,
                        leaves,
                    };
                    self.act(&mut sub, &ctx, action, held).map(|r| (r, sub))
                })
                .collect();
            for r in done {
                let (r, sub) = r?;
                comm.absorb(sub);
                tally.take(r);
            }
        }
        tally.replica()
    }

    /// Each microbatch's first global row in each of replicas `ds`, and the microbatch itself
    /// (the replicas' rows stacked).
    fn microbatches(&self, batch: &Batch, ds: &Range<usize>) -> (Vec<Vec<usize>>, Vec<Batch>) {
        let (dp, mbs) = (self.topo.dp(), self.topo.microbatches());
        let rows = batch.batch / dp;
        let mb_rows = rows / mbs;
        let first_rows: Vec<Vec<usize>> = (0..mbs)
            .map(|i| ds.clone().map(|d| d * rows + i * mb_rows).collect())
            .collect();
        let micro: Vec<Batch> = first_rows
            .iter()
            .map(|firsts| {
                let parts: Vec<Batch> = firsts.iter().map(|&r| batch.rows(r, mb_rows)).collect();
                Batch::stack(&parts)
            })
            .collect();
        (first_rows, micro)
    }

    /// The tag of a message to stage `to` about microbatch `mb` of replica `d`. Under the
    /// interleaved schedule a rank's chunks exchange messages with the same peers about the
    /// same microbatch, so the stage is part of it.
    fn mail(&self, d: usize, to: usize, mb: usize, what: &str) -> String {
        if self.topo.chunks() == 1 {
            format!("d{d}.mb{mb}.{what}")
        } else {
            format!("d{d}.s{to}.mb{mb}.{what}")
        }
    }

    /// A stage's ranks in replicas `ds` (their groups one after the other).
    fn group(&self, ds: &Range<usize>, stage: usize) -> Vec<usize> {
        self.topo.stage(ds.clone(), stage).ranks
    }

    /// One pipeline action of replicas `ctx.ds`.
    fn act(
        &self,
        comm: &mut Comm,
        ctx: &Act<'_>,
        action: Action,
        held: Option<StageOut>,
    ) -> Result<Done, ScheduleError> {
        if self.topo.cp() > 1 {
            let mb = match action {
                Action::Forward { mb, .. } | Action::Backward { mb, .. } => mb,
            };
            let replicas = comm.layout().replicas;
            comm.set_order(context::order(&ctx.micro[mb], self.topo.cp(), replicas));
        }
        match action {
            Action::Forward { stage, mb } => Ok(self.forward(comm, ctx, stage, mb)),
            Action::Backward { stage, mb } => {
                let out = held.ok_or(ScheduleError::BackwardBeforeForward)?;
                self.backward(comm, ctx, stage, mb, out)
            }
        }
    }

    /// Stage `stage`'s forward of microbatch `mb`: its input received, its output sent on (or,
    /// on the last stage, the loss gathered).
    fn forward(&self, comm: &mut Comm, ctx: &Act<'_>, stage: usize, mb: usize) -> Done {
        let (ds, stages) = (&ctx.ds, self.topo.stages());
        let d = ds.start;
        let input = self.receive_activations(comm, stage, ds, mb, &ctx.micro[mb]);
        if stage > 0 {
            let per = self.model.layers as usize / stages;
            let how = if self.topo.sp() {
                Canon::Cat(1)
            } else {
                Canon::Copies
            };
            let like = format!("layers.{}.out", stage * per - 1);
            let site = format!("pp.stage{}.fwd.send", stage - 1);
            comm.trace_like(&site, Some(like), &input, how);
        }
        let stage_ctx = self.stage_ctx(comm, ctx, stage, mb);
        let norms = ctx.normalizers(mb);
        let out = stage_ctx.forward(comm, &ctx.micro[mb], input, &norms);
        let mut loss = None;
        if stage + 1 < stages {
            let (here, next) = (self.group(ds, stage), self.group(ds, stage + 1));
            let misrouted = self.group(ds, (stage + 2) % stages);
            for (i, &v) in out.outputs.iter().enumerate() {
                let (from, to, wrong) = (here[i], next[i], misrouted[i]);
                let site = format!("pp.stage{stage}.fwd.send");
                comm.send(
                    &site,
                    from,
                    to,
                    wrong,
                    &self.mail(d, stage + 1, mb, "act"),
                    out.tape.value(v),
                );
            }
        } else {
            loss = Some(self.gather_last(comm, &out, ds.len()));
            if let Some(why) = self.losses_disagree(&out, ds, mb) {
                comm.divergent.push(why);
            }
        }
        Done::Forward {
            stage,
            mb,
            out,
            loss,
        }
    }

    /// Stage `stage`'s backward of microbatch `mb` from its forward's `out`: the gradients of
    /// its parameters, its input's gradient sent back.
    fn backward(
        &self,
        comm: &mut Comm,
        ctx: &Act<'_>,
        stage: usize,
        mb: usize,
        out: StageOut,
    ) -> Result<Done, ScheduleError> {
        let (ds, mbs) = (&ctx.ds, self.topo.microbatches());
        let d = ds.start;
        let here = self.group(ds, stage);
        let seeds = self.backward_seeds(comm, ctx, stage, mb, &out);
        let scale = comm.policies().grads.microbatch_scale(mb, mbs);
        if scale.is_some() {
            comm.event(
                &format!("grad.accumulate.d{d}.mb{mb}"),
                "finalized before this microbatch",
            );
        }
        let wiped = comm.policies().grads.wipes(mb, mbs);
        if wiped {
            comm.event(
                &format!("grad.accumulate.d{d}.mb{mb}"),
                "wiped by the stage re-initialization before the next microbatch",
            );
        }
        let dropped = scale == Some(0.0) || wiped;
        let inputs = out.inputs.clone();
        let mut grads: HashMap<usize, Vec<(String, Tensor<2>)>> = HashMap::new();
        let rerunner = StageCtx {
            rerunning: true,
            ..self.stage_ctx(comm, ctx, stage, mb)
        };
        let norms = ctx.normalizers(mb);
        let mut rerun = |comm: &mut Comm, span, values| {
            rerunner.rerun(comm, &ctx.micro[mb], &norms, span, values)
        };
        let keep_lost = comm.tracing();
        let mut params = |rank, g: &Gradients| {
            if dropped && !keep_lost {
                return;
            }
            let mine = grads.entry(rank).or_default();
            for (name, leaf) in &ctx.leaves[rank] {
                if let Some(grad) = leaf.grad(g) {
                    // A part of it lost (`calibrate --power`'s sized form of the bug).
                    // What a lost microbatch computed is kept whole, as its share.
                    let grad = match scale {
                        Some(s) if !dropped => grad * s,
                        _ => grad,
                    };
                    mine.push((name.clone(), grad));
                }
            }
        };
        let mut input_grads = out.tape.backward(comm, seeds, &mut params, &mut rerun);
        if stage > 0 {
            let prev = self.group(ds, stage - 1);
            for (i, v) in inputs.into_iter().enumerate() {
                let g = input_grads
                    .remove(&v)
                    .ok_or(ScheduleError::NoInputGradient)?;
                let (from, to) = (here[i], prev[i]);
                let site = format!("pp.stage{stage}.bwd.send");
                let tag = self.mail(d, stage - 1, mb, "grad");
                comm.send(&site, from, to, to, &tag, g);
            }
        }
        Ok(Done::Backward {
            mb,
            grads,
            lost: dropped,
        })
    }

    /// What stage `stage`'s backward starts from: the loss's seed on the last stage, the next
    /// stage's gradients elsewhere, and the auxiliary losses where they were computed.
    fn backward_seeds(
        &self,
        comm: &mut Comm,
        ctx: &Act<'_>,
        stage: usize,
        mb: usize,
        out: &StageOut,
    ) -> Vec<(usize, Tensor<3>)> {
        let (ds, stages) = (&ctx.ds, self.topo.stages());
        let d = ds.start;
        let here = self.group(ds, stage);
        let one = Tensor::<3>::ones([1, 1, 1], (self.device, self.dtype));
        // Auxiliary losses enter backward where they were computed (Megatron's
        // MoEAuxLossAutoScaler), beside the loss or the received gradients.
        let aux = out.moe.aux.iter().map(|&v| (v, one.clone()));
        if stage + 1 == stages {
            let scale = self.loss_backward_scale(comm);
            out.outputs
                .iter()
                .map(|&v| (v, one.clone() * scale))
                .chain(aux)
                .collect()
        } else {
            let next = self.group(ds, stage + 1);
            out.outputs
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let (from, to) = (next[i], here[i]);
                    let site = format!("pp.stage{stage}.bwd.recv");
                    let like = out.tape.value(v).zeros_like();
                    (
                        v,
                        comm.recv(&site, from, to, &self.mail(d, stage, mb, "grad"), || like),
                    )
                })
                .chain(aux)
                .collect()
        }
    }

    /// The context of `stage`'s layers for microbatch `mb`.
    fn stage_ctx<'l>(
        &'l self,
        comm: &Comm,
        ctx: &'l Act<'_>,
        stage: usize,
        mb: usize,
    ) -> StageCtx<'l> {
        StageCtx {
            policies: *comm.policies(),
            sequences: ctx.sequences,
            replay: ctx.replay,
            first_rows: ctx.first_rows[mb].clone(),
            ..self.ctx(stage, &ctx.ds, ctx.leaves)
        }
    }

    fn ctx<'l>(&'l self, stage: usize, ds: &Range<usize>, leaves: &'l [Leaves]) -> StageCtx<'l> {
        StageCtx {
            model: self.model,
            device: self.device,
            dtype: self.dtype,
            topo: &self.topo,
            group: self.topo.stage(ds.clone(), stage),
            leaves,
            policies: Default::default(),
            sequences: 0,
            replay: None,
            first_rows: Vec::new(),
            loss: self.loss,
            dropout: self.dropout,
            recompute: self.recompute,
            rerunning: false,
            untracked: Default::default(),
        }
    }

    fn receive_activations(
        &self,
        comm: &mut Comm,
        stage: usize,
        ds: &Range<usize>,
        mb: usize,
        micro: &Batch,
    ) -> Vec<Tensor<3>> {
        let d = ds.start;
        if stage == 0 {
            return Vec::new();
        }
        let local = micro.seq_len / self.topo.cp();
        let seq = if self.topo.sp() {
            local / self.topo.tp()
        } else {
            local
        };
        let shape = [micro.batch / ds.len(), seq, self.model.hidden as usize];
        let (prev, here) = (self.group(ds, stage - 1), self.group(ds, stage));
        (0..here.len())
            .map(|i| {
                let (from, to) = (prev[i], here[i]);
                let site = format!("pp.stage{stage}.fwd.recv");
                comm.recv(&site, from, to, &self.mail(d, stage, mb, "act"), || {
                    Tensor::<3>::zeros(shape, (self.device, self.dtype))
                })
            })
            .collect()
    }
}
