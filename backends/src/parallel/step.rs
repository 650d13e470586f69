//! One training step of a mesh: data-parallel replicas, each a pipeline of tensor-parallel
//! stages running its microbatches in schedule order, then gradient finalization (the SP
//! all-reduce of norm-weight gradients across TP, the DP all-reduce of every gradient).
//!
//! The loss is normalized by the global token count, itself an all-reduce across DP (as
//! Megatron does for token-level losses), so every replica and microbatch contributes on the
//! oracle's scale and gradients are summed, not averaged.

use std::collections::HashMap;

use burn::tensor::{DType, Device, Tensor, TensorData};
use indexmap::IndexMap;
use meshparity_specs::{MeshConfig, ModelConfig};

use super::collective::Comm;
use super::schedule::{simulate, stage_orders, Action};
use super::stage::{Leaves, StageCtx, StageOut};
use crate::data::Batch;

/// What one step of a mesh (or of the oracle) yields.
pub struct StepOutput {
    /// Global mean token loss.
    pub loss: f64,
    /// Logits over the whole batch, [B, S, V], gathered from every rank that computed them.
    pub logits: Tensor<3>,
    /// Finalized gradients per global rank (the oracle has one rank).
    pub grads: Vec<IndexMap<String, Tensor<2>>>,
}

/// What one data-parallel replica produced.
struct Replica {
    /// Σ over microbatches of the (normalized) loss.
    loss: f64,
    /// Logits of its microbatches, in order.
    logits: Vec<Tensor<3>>,
    /// Accumulated gradients of its ranks.
    acc: HashMap<usize, IndexMap<String, Tensor<2>>>,
}

/// What every action of one replica shares.
struct Act<'a> {
    d: usize,
    normalizer: f64,
    micro: &'a [Batch],
    leaves: &'a [Leaves],
}

/// What one pipeline action produced.
enum Done {
    Forward {
        stage: usize,
        mb: usize,
        out: StageOut,
        /// Last stage: the microbatch's loss and its gathered logits.
        loss: Option<(f64, Tensor<3>)>,
    },
    Backward {
        /// Parameter gradients of this microbatch, per rank.
        grads: HashMap<usize, Vec<(String, Tensor<2>)>>,
    },
}

/// A mesh as the step executor sees it.
pub struct MeshExec<'a> {
    pub model: &'a ModelConfig,
    pub mesh: &'a MeshConfig,
    pub device: &'a Device,
    pub dtype: DType,
}

impl MeshExec<'_> {
    fn rank(&self, tp: usize, dp: usize, pp: usize) -> usize {
        let (t, d) = (self.mesh.tp as usize, self.mesh.dp as usize);
        tp + t * (dp + d * pp)
    }

    fn tp_group(&self, dp: usize, pp: usize) -> Vec<usize> {
        (0..self.mesh.tp as usize)
            .map(|t| self.rank(t, dp, pp))
            .collect()
    }

    fn dp_group(&self, tp: usize, pp: usize) -> Vec<usize> {
        (0..self.mesh.dp as usize)
            .map(|d| self.rank(tp, d, pp))
            .collect()
    }

    /// One step from the given per-rank parameters (no autodiff association).
    pub fn step(
        &self,
        comm: &mut Comm,
        params: &[IndexMap<String, Tensor<2>>],
        batch: &Batch,
    ) -> Result<StepOutput, String> {
        let m = self.mesh;
        let (dp, pp, mbs) = (m.dp as usize, m.pp as usize, m.microbatches as usize);
        let world = params.len();
        let rows = batch.batch / dp;
        let leaves: Vec<Leaves> = params
            .iter()
            .map(|p| {
                p.iter()
                    .map(|(n, t)| (n.clone(), t.clone().autodiff().require_grad()))
                    .collect()
            })
            .collect();
        let (ticks, _) = simulate(&stage_orders(m.schedule, pp, mbs))?;

        // The loss normalizer: counted tokens over the whole global batch.
        let last_ranks: Vec<usize> = (0..dp).map(|d| self.rank(0, d, pp - 1)).collect();
        let counts: Vec<Tensor<1>> = (0..dp)
            .map(|d| f64_tensor(batch.rows(d * rows, rows).counted() as f64, self.device))
            .collect();
        let normalizers: Vec<f64> = comm
            .all_reduce_sum("loss.tokens.dp.all_reduce", &last_ranks, counts)
            .into_iter()
            .map(scalar)
            .collect();

        // Replicas are independent until the gradient all-reduce: each runs on its own thread
        // with its own communicator (their logs are merged in replica order afterwards).
        // On the thread pool, like the ranks within a replica.
        let fault = comm.fault();
        let replicas: Vec<Result<(Replica, Comm), String>> = {
            use rayon::prelude::*;
            normalizers
                .par_iter()
                .enumerate()
                .map(|(d, &normalizer)| {
                    let mut sub = Comm::new(fault);
                    self.replica(&mut sub, d, normalizer, batch, &leaves, &ticks)
                        .map(|r| (r, sub))
                })
                .collect()
        };
        let mut acc: Vec<IndexMap<String, Tensor<2>>> = vec![IndexMap::new(); world];
        let mut replica_losses: Vec<Tensor<1>> = Vec::with_capacity(dp);
        let mut logits_rows: Vec<Tensor<3>> = Vec::with_capacity(dp * mbs);
        for r in replicas {
            let (r, sub) = r?;
            comm.absorb(sub);
            replica_losses.push(f64_tensor(r.loss, self.device));
            logits_rows.extend(r.logits);
            for (rank, grads) in r.acc {
                acc[rank] = grads;
            }
        }
        let loss = scalar(
            comm.all_reduce_sum("loss.report.dp.all_reduce", &last_ranks, replica_losses)
                .remove(0),
        );
        let grads = self.finalize(comm, params, acc);
        Ok(StepOutput {
            loss,
            logits: Tensor::cat(logits_rows, 0),
            grads,
        })
    }

    /// One data-parallel replica's pipeline over its microbatches, in schedule order: the
    /// actions of one clock tick run on different stages and depend only on messages of earlier
    /// ticks, so they run concurrently, each with a sub-communicator holding its stage's mail.
    fn replica(
        &self,
        comm: &mut Comm,
        d: usize,
        normalizer: f64,
        batch: &Batch,
        leaves: &[Leaves],
        ticks: &[Vec<Action>],
    ) -> Result<Replica, String> {
        use rayon::prelude::*;
        let (dp, mbs) = (self.mesh.dp as usize, self.mesh.microbatches as usize);
        let rows = batch.batch / dp;
        let mb_rows = rows / mbs;
        let micro: Vec<Batch> = (0..mbs)
            .map(|i| batch.rows(d * rows + i * mb_rows, mb_rows))
            .collect();
        let mut acc: HashMap<usize, IndexMap<String, Tensor<2>>> = HashMap::new();
        let mut live: HashMap<(usize, usize), StageOut> = HashMap::new();
        let mut losses = vec![0.0; mbs];
        let mut logits: Vec<Option<Tensor<3>>> = vec![None; mbs];
        for tick in ticks {
            let mut work = Vec::with_capacity(tick.len());
            for &action in tick {
                let (stage, held) = match action {
                    Action::Forward { stage, .. } => (stage, None),
                    Action::Backward { stage, mb } => (
                        stage,
                        Some(live.remove(&(stage, mb)).ok_or("backward before forward")?),
                    ),
                };
                work.push((action, held, comm.split(&self.tp_group(d, stage))));
            }
            let done: Vec<Result<(Done, Comm), String>> = work
                .into_par_iter()
                .map(|(action, held, mut sub)| {
                    let ctx = Act {
                        d,
                        normalizer,
                        micro: &micro,
                        leaves,
                    };
                    self.act(&mut sub, &ctx, action, held).map(|r| (r, sub))
                })
                .collect();
            for r in done {
                let (r, sub) = r?;
                comm.absorb(sub);
                match r {
                    Done::Forward {
                        stage,
                        mb,
                        out,
                        loss,
                    } => {
                        if let Some((l, lg)) = loss {
                            losses[mb] = l;
                            logits[mb] = Some(lg);
                        }
                        live.insert((stage, mb), out);
                    }
                    Done::Backward { grads } => {
                        for (rank, g) in grads {
                            let acc = acc.entry(rank).or_default();
                            for (name, grad) in g {
                                let sum = match acc.swap_remove(&name) {
                                    Some(prev) => prev + grad,
                                    None => grad,
                                };
                                acc.insert(name, sum);
                            }
                        }
                    }
                }
            }
        }
        Ok(Replica {
            loss: losses.iter().sum(),
            logits: logits
                .into_iter()
                .map(|l| l.ok_or("a microbatch never reached the last stage"))
                .collect::<Result<_, _>>()?,
            acc,
        })
    }

    /// One pipeline action of replica `ctx.d`.
    fn act(
        &self,
        comm: &mut Comm,
        ctx: &Act<'_>,
        action: Action,
        held: Option<StageOut>,
    ) -> Result<Done, String> {
        let (d, pp, mbs) = (
            ctx.d,
            self.mesh.pp as usize,
            self.mesh.microbatches as usize,
        );
        match action {
            Action::Forward { stage, mb } => {
                let input = self.receive_activations(comm, stage, d, mb, &ctx.micro[mb]);
                let out = self.ctx(stage, d, ctx.leaves).forward(
                    comm,
                    &ctx.micro[mb],
                    input,
                    ctx.normalizer,
                );
                let mut loss = None;
                if stage + 1 < pp {
                    for (t, &v) in out.outputs.iter().enumerate() {
                        let (from, to) = (self.rank(t, d, stage), self.rank(t, d, stage + 1));
                        let wrong = self.rank(t, d, (stage + 2) % pp);
                        let site = format!("pp.stage{stage}.fwd.send");
                        comm.send(
                            &site,
                            from,
                            to,
                            wrong,
                            &format!("d{d}.mb{mb}.act"),
                            out.tape.value(v),
                        );
                    }
                } else {
                    let l = scalar(out.tape.value(out.outputs[0]).reshape([1]));
                    let parts: Vec<Tensor<3>> =
                        out.logits.iter().map(|&v| out.tape.value(v)).collect();
                    loss = Some((l, Tensor::cat(parts, 2)));
                }
                Ok(Done::Forward {
                    stage,
                    mb,
                    out,
                    loss,
                })
            }
            Action::Backward { stage, mb } => {
                let out = held.ok_or("backward before forward")?;
                let seeds: Vec<(usize, Tensor<3>)> = if stage + 1 == pp {
                    let one = Tensor::<3>::ones([1, 1, 1], (self.device, self.dtype));
                    out.outputs.iter().map(|&v| (v, one.clone())).collect()
                } else {
                    out.outputs
                        .iter()
                        .enumerate()
                        .map(|(t, &v)| {
                            let (from, to) = (self.rank(t, d, stage + 1), self.rank(t, d, stage));
                            let site = format!("pp.stage{stage}.bwd.recv");
                            let like = out.tape.value(v).zeros_like();
                            (
                                v,
                                comm.recv(&site, from, to, &format!("d{d}.mb{mb}.grad"), || like),
                            )
                        })
                        .collect()
                };
                let dropped = comm.fault().is_some_and(|f| f.drops_microbatch(mb, mbs));
                if dropped {
                    comm.event(
                        &format!("grad.accumulate.d{d}.mb{mb}"),
                        "finalized before this microbatch",
                    );
                }
                let inputs = out.inputs.clone();
                let mut grads: HashMap<usize, Vec<(String, Tensor<2>)>> = HashMap::new();
                let mut input_grads = out.tape.backward(comm, seeds, |rank, g| {
                    if dropped {
                        return;
                    }
                    let mine = grads.entry(rank).or_default();
                    for (name, leaf) in &ctx.leaves[rank] {
                        if let Some(grad) = leaf.grad(g) {
                            mine.push((name.clone(), grad));
                        }
                    }
                });
                if stage > 0 {
                    for (t, v) in inputs.into_iter().enumerate() {
                        let g = input_grads
                            .remove(&v)
                            .ok_or("a stage input got no gradient")?;
                        let (from, to) = (self.rank(t, d, stage), self.rank(t, d, stage - 1));
                        let site = format!("pp.stage{stage}.bwd.send");
                        comm.send(&site, from, to, to, &format!("d{d}.mb{mb}.grad"), g);
                    }
                }
                Ok(Done::Backward { grads })
            }
        }
    }

    fn ctx<'l>(&'l self, stage: usize, dp: usize, leaves: &'l [Leaves]) -> StageCtx<'l> {
        StageCtx {
            model: self.model,
            device: self.device,
            dtype: self.dtype,
            stage,
            stages: self.mesh.pp as usize,
            ranks: self.tp_group(dp, stage),
            sp: self.mesh.sp && self.mesh.tp > 1,
            leaves,
        }
    }

    fn receive_activations(
        &self,
        comm: &mut Comm,
        stage: usize,
        d: usize,
        mb: usize,
        micro: &Batch,
    ) -> Vec<Tensor<3>> {
        if stage == 0 {
            return Vec::new();
        }
        let tp = self.mesh.tp as usize;
        let seq = if self.mesh.sp && tp > 1 {
            micro.seq_len / tp
        } else {
            micro.seq_len
        };
        let shape = [micro.batch, seq, self.model.hidden as usize];
        (0..tp)
            .map(|t| {
                let (from, to) = (self.rank(t, d, stage - 1), self.rank(t, d, stage));
                let site = format!("pp.stage{stage}.fwd.recv");
                comm.recv(&site, from, to, &format!("d{d}.mb{mb}.act"), || {
                    Tensor::<3>::zeros(shape, (self.device, self.dtype))
                })
            })
            .collect()
    }

    /// Gradients as the optimizer sees them: the wrong-scale fault, the SP norm-weight
    /// all-reduce across TP, the DP all-reduce.
    fn finalize(
        &self,
        comm: &mut Comm,
        params: &[IndexMap<String, Tensor<2>>],
        mut acc: Vec<IndexMap<String, Tensor<2>>>,
    ) -> Vec<IndexMap<String, Tensor<2>>> {
        let world = params.len();
        let mut grads: Vec<IndexMap<String, Tensor<2>>> = params
            .iter()
            .enumerate()
            .map(|(r, p)| {
                p.iter()
                    .map(|(n, t)| {
                        (
                            n.clone(),
                            acc[r].swap_remove(n).unwrap_or_else(|| t.zeros_like()),
                        )
                    })
                    .collect()
            })
            .collect();
        if let Some(scale) = comm.fault().and_then(|f| f.grad_scale(world - 1, world)) {
            comm.event(
                &format!("grad.rank{}.scale", world - 1),
                "scaled by a wrong factor",
            );
            for g in grads[world - 1].values_mut() {
                *g = g.clone() * scale;
            }
        }
        let m = self.mesh;
        let mut reduce = |comm: &mut Comm, ranks: Vec<usize>, names: Vec<String>, group: &str| {
            for name in names {
                let parts = ranks.iter().map(|&r| grads[r][&name].clone()).collect();
                let site = format!("grad.{name}.{group}.all_reduce");
                for (&r, g) in ranks.iter().zip(comm.all_reduce_sum(&site, &ranks, parts)) {
                    grads[r][&name] = g;
                }
            }
        };
        for s in 0..m.pp as usize {
            for d in 0..m.dp as usize {
                if m.sp && m.tp > 1 {
                    let ranks = self.tp_group(d, s);
                    let norms = params[ranks[0]]
                        .keys()
                        .filter(|n| n.contains("norm"))
                        .cloned()
                        .collect();
                    reduce(comm, ranks, norms, "tp");
                }
            }
            for t in 0..m.tp as usize {
                let ranks = self.dp_group(t, s);
                let names = params[ranks[0]].keys().cloned().collect();
                reduce(comm, ranks, names, "dp");
            }
        }
        grads
    }
}

fn f64_tensor(v: f64, device: &Device) -> Tensor<1> {
    Tensor::<1>::from_data(TensorData::new(vec![v], [1]), (device, DType::F64))
}

/// The value of a one-element tensor.
pub fn scalar<const D: usize>(t: Tensor<D>) -> f64 {
    t.into_data()
        .convert::<f64>()
        .try_to_vec::<f64>()
        .expect("float data")[0]
}
