//! One training step of a mesh: data-parallel replicas, each a pipeline of TP × CP stages
//! running its microbatches in schedule order, then gradient finalization (the SP all-reduce of
//! norm-weight gradients across TP, the all-reduce of every gradient across the data-parallel
//! group, whose ranks under context parallelism include the cp ranks).
//!
//! The loss is normalized by the global token count, itself an all-reduce across DP (as
//! Megatron does for token-level losses), so every replica and microbatch contributes on the
//! oracle's scale and gradients are summed, not averaged.

use burn::tensor::{DType, Device, Tensor, TensorData};
use indexmap::IndexMap;
use meshparity_specs::{MeshConfig, ModelConfig};

use super::collective::Comm;
use super::context::Local;
use super::experts::RouteRecord;
use super::pipeline::{Replica, StepInput};
use super::schedule::{simulate, stage_orders};
use super::stage::Leaves;
use super::trace::{canon, Canon, Value};
use crate::data::Batch;
use crate::llama::moe::Choice;
use crate::sharding::{Placement, ShardingPlan};

/// What one step of a mesh (or of the oracle) yields.
pub struct StepOutput {
    /// Global mean token loss.
    pub loss: f64,
    /// The moe family's load-balance loss (0 for dense models).
    pub load_balance: f64,
    /// The moe family's routing, each record with its first global row.
    pub routing: Vec<(usize, RouteRecord)>,
    /// Logits over the whole batch, [B, S, V], gathered from every rank that computed them.
    pub logits: Tensor<3>,
    /// Finalized gradients per global rank (the oracle has one rank).
    pub grads: Vec<IndexMap<String, Tensor<2>>>,
}

/// A mesh as the step executor sees it.
pub struct MeshExec<'a> {
    pub model: &'a ModelConfig,
    pub mesh: &'a MeshConfig,
    pub device: &'a Device,
    pub dtype: DType,
}

impl MeshExec<'_> {
    /// The global rank of (tp, cp, dp, pp), by the project's one rank map.
    pub(super) fn rank(&self, tp: usize, cp: usize, dp: usize, pp: usize) -> usize {
        self.mesh.rank(meshparity_specs::Coord { tp, cp, dp, pp })
    }

    fn tp_group(&self, cp: usize, dp: usize, pp: usize) -> Vec<usize> {
        (0..self.mesh.tp as usize)
            .map(|t| self.rank(t, cp, dp, pp))
            .collect()
    }

    /// A stage's ranks in one replica: its TP groups, one per cp index ([`Groups`] order).
    ///
    /// [`Groups`]: super::context::Groups
    pub(super) fn stage_group(&self, dp: usize, pp: usize) -> Vec<usize> {
        (0..self.mesh.cp as usize)
            .flat_map(|c| self.tp_group(c, dp, pp))
            .collect()
    }

    /// The ranks that hold replicas of one TP shard of a stage: Megatron's data-parallel group
    /// with the context-parallel ranks in it (each holds other tokens of the same rows), in
    /// rank order.
    fn dp_group(&self, tp: usize, pp: usize) -> Vec<usize> {
        (0..self.mesh.dp as usize)
            .flat_map(|d| (0..self.mesh.cp as usize).map(move |c| (c, d)))
            .map(|(c, d)| self.rank(tp, c, d, pp))
            .collect()
    }

    /// One step from the given per-rank parameters (no autodiff association), replaying
    /// `replay`'s routing (per layer, per global token) where given.
    pub fn step(
        &self,
        comm: &mut Comm,
        params: &[IndexMap<String, Tensor<2>>],
        batch: &Batch,
        replay: Option<&[Vec<Choice>]>,
    ) -> Result<StepOutput, String> {
        let m = self.mesh;
        let (dp, cp, pp, mbs) = (
            m.dp as usize,
            m.cp as usize,
            m.pp as usize,
            m.microbatches as usize,
        );
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

        // The loss normalizer: counted tokens over the whole global batch, each (dp, cp) rank's
        // own count all-reduced over the data-parallel group (cp ranks in it).
        let last_ranks: Vec<usize> = (0..dp)
            .flat_map(|d| (0..cp).map(move |c| (c, d)))
            .map(|(c, d)| self.rank(0, c, d, pp - 1))
            .collect();
        let counts: Vec<Tensor<1>> = (0..dp)
            .flat_map(|d| Local::split(&batch.rows(d * rows, rows), cp))
            .map(|local| f64_tensor(local.batch.counted() as f64, self.device))
            .collect();
        let normalizers: Vec<f64> = comm
            .all_reduce_sum("loss.tokens.dp.all_reduce", &last_ranks, counts)
            .into_iter()
            .map(scalar)
            .collect();
        let counts = normalizers.iter().map(|&n| Value {
            shape: vec![1],
            data: vec![n],
        });
        comm.trace_values("loss.tokens.dp", counts.collect());

        // Replicas are independent until the gradient all-reduce: each runs on its own thread
        // with its own communicator (their logs are merged in replica order afterwards).
        // On the thread pool, like the ranks within a replica.
        let fault = comm.fault();
        let tracing = comm.tracing();
        let replicas: Vec<Result<(Replica, Comm), String>> = {
            use rayon::prelude::*;
            normalizers
                .par_chunks(cp)
                .enumerate()
                .map(|(d, normalizers)| {
                    let mut sub = Comm::new(fault);
                    sub.set_tracing(tracing);
                    let input = StepInput { batch, replay };
                    self.replica(&mut sub, d, normalizers, input, &leaves, &ticks)
                        .map(|r| (r, sub))
                })
                .collect()
        };
        let mut acc: Vec<IndexMap<String, Tensor<2>>> = vec![IndexMap::new(); world];
        let mut replica_losses: Vec<Tensor<1>> = Vec::with_capacity(dp);
        let mut logits_rows: Vec<Tensor<3>> = Vec::with_capacity(dp * mbs);
        let (mut load_balance, mut routing) = (0.0, Vec::new());
        for (d, r) in replicas.into_iter().enumerate() {
            let (r, sub) = r?;
            comm.absorb(sub);
            replica_losses.push(f64_tensor(r.loss, self.device));
            load_balance += r.load_balance;
            routing.extend(r.routing);
            logits_rows.extend(r.logits);
            let wrong = fault.and_then(|f| f.replica_scale(d, dp, mbs));
            if wrong.is_some() {
                comm.event(
                    &format!("grad.replica{d}.accumulate"),
                    "counted one microbatch too many",
                );
            }
            for (rank, mut grads) in r.acc {
                if let Some(scale) = wrong {
                    grads.values_mut().for_each(|g| *g = g.clone() * scale);
                }
                acc[rank] = grads;
            }
        }
        let report_ranks: Vec<usize> = (0..dp).map(|d| self.rank(0, 0, d, pp - 1)).collect();
        let loss = scalar(
            comm.all_reduce_sum("loss.report.dp.all_reduce", &report_ranks, replica_losses)
                .remove(0),
        );
        let grads = self.finalize(comm, params, acc);
        Ok(StepOutput {
            loss,
            load_balance,
            routing,
            logits: Tensor::cat(logits_rows, 0),
            grads,
        })
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
        for (rank, held) in grads.iter_mut().enumerate() {
            if let Some(scale) = comm.fault().and_then(|f| f.grad_scale(rank, world)) {
                comm.event(
                    &format!("grad.rank{rank}.scale"),
                    "scaled by a wrong factor",
                );
                for g in held.values_mut() {
                    *g = g.clone() * scale;
                }
            }
        }
        self.trace_grads(comm, &grads, false);
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
        let cp_skipped = comm.fault().is_some_and(|f| f.cp_grad_reduce_skipped()) && m.cp > 1;
        if cp_skipped {
            comm.event(
                "grad.dp_cp.all_reduce",
                "reduced over dp only, cp ranks left out",
            );
        }
        for s in 0..m.pp as usize {
            for (c, d) in (0..m.dp as usize).flat_map(|d| (0..m.cp as usize).map(move |c| (c, d))) {
                if m.sp && m.tp > 1 {
                    let ranks = self.tp_group(c, d, s);
                    // Replicated weights used on sequence shards: partial gradients per rank.
                    let norms = params[ranks[0]]
                        .keys()
                        .filter(|n| {
                            n.contains("norm") || n.contains(".router.") || n.contains(".experts.")
                        })
                        .cloned()
                        .collect();
                    reduce(comm, ranks, norms, "tp");
                }
            }
            for t in 0..m.tp as usize {
                let group = self.dp_group(t, s);
                let names: Vec<String> = params[group[0]].keys().cloned().collect();
                if cp_skipped {
                    for c in 0..m.cp as usize {
                        let ranks = (0..m.dp as usize).map(|d| self.rank(t, c, d, s)).collect();
                        reduce(comm, ranks, names.clone(), "dp");
                    }
                } else {
                    reduce(comm, group, names, "dp");
                }
            }
        }
        self.trace_grads(comm, &grads, true);
        grads
    }

    /// Trace every parameter's gradient as accumulated (summed over DP, merged over TP: what
    /// the whole batch's gradient is) or as finalized (each DP replica's copy, merged over TP).
    fn trace_grads(&self, comm: &mut Comm, grads: &[IndexMap<String, Tensor<2>>], finalized: bool) {
        if !comm.tracing() {
            return;
        }
        let (tp, dp) = (self.mesh.tp as usize, self.mesh.dp as usize);
        let sp = self.mesh.sp && tp > 1;
        for rule in ShardingPlan::llama(self.model, self.mesh).rules {
            // Replicas: the data-parallel group's ranks, cp ranks included.
            let at =
                |t: usize, d: usize| grads[self.dp_group(t, rule.stage)[d]][&rule.name].clone();
            let dp = dp * self.mesh.cp as usize;
            let over_tp = |per_t: Vec<Tensor<2>>| match rule.placement {
                Placement::Split(dim) => canon(&per_t, Canon::Cat(dim), 1),
                Placement::Replicated if sp && !finalized => canon(&per_t, Canon::Sum, 1),
                Placement::Replicated => canon(&per_t, Canon::Copies, 1),
            };
            let copies: Vec<Value> = if finalized {
                (0..dp)
                    .flat_map(|d| over_tp((0..tp).map(|t| at(t, d)).collect()))
                    .collect()
            } else {
                let summed = (0..tp).map(|t| {
                    let mut it = (0..dp).map(|d| at(t, d));
                    let first = it.next().expect("dp ≥ 1");
                    it.fold(first, |a, b| a + b)
                });
                over_tp(summed.collect())
            };
            let what = if finalized { "dp" } else { "accumulated" };
            comm.trace_values(&format!("grad.{}.{what}", rule.name), copies);
        }
    }
}

/// A one-element tensor for token counts and reported losses: f64 where the device has it;
/// else the widest float it has (WGSL and GLSL kernels have no f64), where token counts below
/// 2^24 stay exact.
fn f64_tensor(v: f64, device: &Device) -> Tensor<1> {
    let dtype = if device.supports_dtype(DType::F64) {
        DType::F64
    } else {
        DType::F32
    };
    Tensor::<1>::from_data(TensorData::new(vec![v], [1]), (device, dtype))
}

/// The value of a one-element tensor.
pub fn scalar<const D: usize>(t: Tensor<D>) -> f64 {
    t.into_data()
        .convert::<f64>()
        .try_to_vec::<f64>()
        .expect("float data")[0]
}
