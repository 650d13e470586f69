//! One training step of a mesh: data-parallel replicas, each a pipeline of TP × CP stages
//! running its microbatches in schedule order (under expert parallelism, every replica in
//! lockstep), then gradient finalization (`finalize.rs`).
//!
//! The loss is normalized by the global token count, itself an all-reduce across DP (as
//! Megatron does for token-level losses), so every replica and microbatch contributes on the
//! oracle's scale and gradients are summed, not averaged.

use std::collections::{BTreeMap, HashMap};

use burn::tensor::{Tensor, TensorData};
use indexmap::IndexMap;

use super::finalize::Lost;
use super::replica::{Replica, StepInput};
use super::schedule::{simulate, stage_orders, Action, ScheduleError};
use super::{count_dtype, f64_tensor, scalar, MeshExec};
use crate::data::Batch;
use crate::llama::moe::Decided;
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::trace::Value;
use crate::parallel::context::Local;
use crate::parallel::layers::ctx::Leaves;
use crate::parallel::layers::experts::RouteRecord;

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
    /// Finalized gradients per global rank (the oracle has one rank), clipped where the run
    /// clips.
    pub grads: Vec<IndexMap<String, Tensor<2>>>,
    /// The global gradient norm before clipping, as each rank computed it (empty for a step
    /// without backward). Correct ranks agree to the bit: each gets the same all-reduced sums.
    pub grad_norms: Vec<f64>,
    /// With a score-correction bias: per global rank, each of its layers' load over the global
    /// batch (tokens routed to each expert), for the bias update.
    pub loads: Vec<BTreeMap<u32, Vec<f64>>>,
}

impl MeshExec<'_> {
    /// One step from the given per-rank parameters (no autodiff association), replaying
    /// `replay`'s routing (per layer, per global token) where given.
    pub fn step(
        &self,
        comm: &mut Comm,
        params: &[IndexMap<String, Tensor<2>>],
        batch: &Batch,
        replay: Option<&[Decided]>,
    ) -> Result<StepOutput, ScheduleError> {
        let t = &self.topo;
        let (dp, mbs) = (t.dp(), t.microbatches());
        let world = params.len();
        let leaves: Vec<Leaves> = params
            .iter()
            .map(|p| {
                p.iter()
                    .map(|(n, t)| (n.clone(), t.clone().autodiff().require_grad()))
                    .collect()
            })
            .collect();
        let ticks = self.ticks()?;
        let last_ranks = t.loss_ranks();
        let normalizers = self.token_normalizers(comm, batch, &last_ranks);
        let per_microbatch = self.microbatch_normalizers(comm, batch, &last_ranks);
        let input = StepInput {
            batch,
            replay,
            per_microbatch: per_microbatch.as_deref(),
        };
        let replicas = self.replicas(comm, &normalizers, input, &leaves, &ticks);
        let mut acc: Vec<Vec<IndexMap<String, Tensor<2>>>> = vec![Vec::new(); world];
        let mut lost: Vec<Lost> = vec![Vec::new(); world];
        let mut replica_losses: Vec<Vec<f64>> = Vec::with_capacity(dp);
        let mut logits_rows: Vec<Tensor<3>> = Vec::with_capacity(dp * mbs);
        let (mut load_balance, mut routing) = (0.0, Vec::new());
        let mut local_loads = BTreeMap::new();
        for r in replicas {
            let (r, sub) = r?;
            comm.absorb(sub);
            replica_losses.extend(r.loss);
            load_balance += r.load_balance;
            routing.extend(r.routing);
            local_loads.extend(r.load);
            logits_rows.extend(r.logits);
            for (rank, held) in r.lost {
                lost[rank].extend(held);
            }
            self.hold(comm, &mut acc, r.acc);
        }
        let loss = self.reported_loss(comm, batch, normalizers[0], replica_losses);
        let (grads, loads, grad_norms) = if self.backward {
            let mut grads = self.finalize(comm, params, acc, lost);
            let norms = self.clip(comm, &mut grads);
            let loads = self.reduce_loads(comm, params, local_loads);
            (grads, loads, norms)
        } else {
            (
                vec![IndexMap::new(); world],
                vec![BTreeMap::new(); world],
                Vec::new(),
            )
        };
        Ok(StepOutput {
            loss,
            load_balance,
            routing,
            logits: Tensor::cat(logits_rows, 0),
            grads,
            grad_norms,
            loads,
        })
    }

    /// Every replica's pipeline. Replicas are independent until the gradient all-reduce
    /// (unless experts are parallel: then they run in lockstep): each runs on its own thread
    /// with its own communicator (their logs are merged in replica order afterwards), on the
    /// thread pool like the ranks within a replica.
    fn replicas(
        &self,
        comm: &Comm,
        normalizers: &[f64],
        input: StepInput<'_>,
        leaves: &[Leaves],
        ticks: &[Vec<Action>],
    ) -> Vec<Result<(Replica, Comm), ScheduleError>> {
        use rayon::prelude::*;
        let (policies, tracing) = (*comm.policies(), comm.tracing());
        let lock = self.topo.lockstep();
        normalizers
            .par_chunks(self.topo.cp() * lock)
            .enumerate()
            .map(|(k, normalizers)| {
                let mut sub = Comm::new(policies);
                sub.set_tracing(tracing);
                let ds = k * lock..(k + 1) * lock;
                self.replica(&mut sub, ds, normalizers, input, leaves, ticks)
                    .map(|r| (r, sub))
            })
            .collect()
    }

    /// The pipeline's actions tick by tick (its forward actions alone without backward).
    fn ticks(&self) -> Result<Vec<Vec<Action>>, ScheduleError> {
        let t = &self.topo;
        let orders = stage_orders(t.mesh().schedule, t.pp(), t.chunks(), t.microbatches());
        let (mut ticks, _) = simulate(&orders, t.stages())?;
        if !self.backward {
            for tick in &mut ticks {
                tick.retain(|a| matches!(a, Action::Forward { .. }));
            }
            ticks.retain(|tick| !tick.is_empty());
        }
        Ok(ticks)
    }

    /// The loss normalizer: counted tokens over the whole global batch, each (dp, cp) rank's
    /// own count all-reduced over the data-parallel group (cp ranks in it) and traced.
    fn token_normalizers(&self, comm: &mut Comm, batch: &Batch, last_ranks: &[usize]) -> Vec<f64> {
        let (dp, cp) = (self.topo.dp(), self.topo.cp());
        let rows = batch.batch / dp;
        let counts: Vec<Tensor<1>> = (0..dp)
            .flat_map(|d| Local::split(&batch.rows(d * rows, rows), cp, 1))
            .map(|local| f64_tensor(local.batch.counted() as f64, self.device))
            .collect();
        let normalizers: Vec<f64> = comm
            .all_reduce_sum("loss.tokens.dp.all_reduce", last_ranks, counts)
            .into_iter()
            .map(scalar)
            .collect();
        let counts = normalizers.iter().map(|&n| Value {
            shape: vec![1],
            data: vec![n],
        });
        comm.trace_values("loss.tokens.dp", counts.collect());
        normalizers
    }

    /// A replica's accumulated gradients into `acc` by global rank (scaled on the replica
    /// the catalogued accumulation-count bug hits).
    fn hold(
        &self,
        comm: &mut Comm,
        acc: &mut [Vec<IndexMap<String, Tensor<2>>>],
        replica: HashMap<usize, Vec<IndexMap<String, Tensor<2>>>>,
    ) {
        let t = &self.topo;
        let (dp, mbs) = (t.dp(), t.microbatches());
        let policy = comm.policies().grads;
        let mut held: Vec<_> = replica.into_iter().collect();
        held.sort_unstable_by_key(|(rank, _)| *rank);
        let mut said = Vec::new();
        for (rank, mut grads) in held {
            let d = t.coord(rank).dp;
            if let Some(scale) = policy.replica_scale(d, dp, mbs) {
                if !said.contains(&d) {
                    said.push(d);
                    comm.event(
                        &format!("grad.replica{d}.accumulate"),
                        "counted one microbatch too many",
                    );
                }
                for g in grads.iter_mut().flat_map(IndexMap::values_mut) {
                    *g = g.clone() * scale;
                }
            }
            acc[rank] = grads;
        }
    }

    /// Each layer's expert load over the global batch, on every rank of its stage that moves
    /// its bias by it: the ranks' own counts all-reduced over the stage (Megatron's tensor ×
    /// data × context-parallel group; TP ranks without SP count the same tokens, which scales
    /// every expert's load alike and leaves the sign update as it is). Traced: the load as
    /// shares of the total, and each rank's bias after the update.
    fn reduce_loads(
        &self,
        comm: &mut Comm,
        params: &[IndexMap<String, Tensor<2>>],
        local: BTreeMap<(usize, u32), Vec<f64>>,
    ) -> Vec<BTreeMap<u32, Vec<f64>>> {
        let mut out = vec![BTreeMap::new(); params.len()];
        let mut layers: BTreeMap<u32, Vec<(usize, Vec<f64>)>> = BTreeMap::new();
        for ((rank, layer), counts) in local {
            layers.entry(layer).or_default().push((rank, counts));
        }
        for (layer, held) in layers {
            let ranks: Vec<usize> = held.iter().map(|(r, _)| *r).collect();
            let parts = held
                .into_iter()
                .map(|(_, c)| {
                    let n = c.len();
                    Tensor::<1>::from_data(
                        TensorData::new(c, [n]),
                        (self.device, count_dtype(self.device)),
                    )
                })
                .collect();
            let site = format!("layers.{layer}.mlp.router.expert_bias");
            let summed = comm.all_reduce_sum(&format!("{site}.all_reduce"), &ranks, parts);
            // The catalogued bug: only the stage's first rank moves its bias.
            let one_rank = comm.policies().layers.at(layer).bias_one_rank;
            if one_rank && ranks.len() > 1 {
                comm.event(&site, "moved on the stage's first rank only");
            }
            let (mut shares, mut next) = (Vec::new(), Vec::new());
            for (j, (rank, t)) in ranks.into_iter().zip(summed).enumerate() {
                let load = crate::llama::moe::values(&t);
                let total = load.iter().sum::<f64>().max(f64::MIN_POSITIVE);
                shares.push(values(load.iter().map(|x| x / total).collect()));
                let bias = crate::llama::moe::values(&params[rank][&site]);
                if one_rank && j > 0 {
                    next.push(values(bias));
                    continue;
                }
                next.push(values(crate::llama::balance::update_bias(&bias, &load)));
                out[rank].insert(layer, load);
            }
            comm.trace_values(&format!("{site}.load"), shares);
            comm.trace_values(&site, next);
        }
        out
    }
}

/// A traced vector.
fn values(data: Vec<f64>) -> Value {
    Value {
        shape: vec![data.len()],
        data,
    }
}

impl MeshExec<'_> {
    /// The loss the step reports: each replica's microbatch losses summed and all-reduced over
    /// DP, the global batch's mean per counted token. With the catalogued metric bug (a logged
    /// loss that sums the microbatches' own means, never divided by their number, and averages
    /// the replicas'), what that logger shows; the gradients are not touched.
    fn reported_loss(
        &self,
        comm: &mut Comm,
        batch: &Batch,
        global: f64,
        losses: Vec<Vec<f64>>,
    ) -> f64 {
        let t = &self.topo;
        let (dp, mbs) = (t.dp(), t.microbatches());
        let unaveraged = comm.policies().loss.logs_microbatch_sum;
        let per_replica: Vec<Tensor<1>> = if unaveraged {
            comm.event(
                "loss.report.dp.all_reduce",
                "the logged loss sums the microbatches' own means and averages the replicas'",
            );
            let (rows, mb_rows) = (batch.batch / dp, batch.batch / dp / mbs);
            losses
                .iter()
                .enumerate()
                .map(|(d, mb_losses)| {
                    let means = mb_losses.iter().enumerate().map(|(m, &l)| {
                        let own = batch.rows(d * rows + m * mb_rows, mb_rows).counted();
                        l * global / own.max(1) as f64
                    });
                    f64_tensor(means.sum::<f64>() / dp as f64, self.device)
                })
                .collect()
        } else {
            losses
                .iter()
                .map(|l| f64_tensor(l.iter().sum(), self.device))
                .collect()
        };
        let report_ranks = t.report_ranks();
        scalar(
            comm.all_reduce_sum("loss.report.dp.all_reduce", &report_ranks, per_replica)
                .remove(0),
        )
    }

    /// The catalogued bug of gradient accumulation (huggingface/transformers#34191, torchtitan
    /// PR#2206): each microbatch's loss normalized by its own valid-token count (all-reduced over
    /// DP) and the microbatches' losses averaged — a mean of means, which weighs a token of a
    /// short microbatch more than one of a long. `None` without the fault or with one
    /// microbatch, where the microbatch's count is the step's.
    fn microbatch_normalizers(
        &self,
        comm: &mut Comm,
        batch: &Batch,
        last_ranks: &[usize],
    ) -> Option<Vec<f64>> {
        let t = &self.topo;
        let (dp, cp, mbs) = (t.dp(), t.cp(), t.microbatches());
        if !comm.policies().loss.normalizes_per_microbatch {
            return None;
        }
        comm.event(
            "loss.tokens.mb",
            "each microbatch normalized by its own token count",
        );
        let (rows, mb_rows) = (batch.batch / dp, batch.batch / dp / mbs);
        let per = (0..mbs).map(|m| {
            let counts: Vec<Tensor<1>> = (0..dp)
                .flat_map(|d| Local::split(&batch.rows(d * rows + m * mb_rows, mb_rows), cp, 1))
                .map(|local| f64_tensor(local.batch.counted() as f64, self.device))
                .collect();
            let site = format!("loss.tokens.mb{m}.dp.all_reduce");
            let n = comm.all_reduce_sum(&site, last_ranks, counts);
            // A microbatch with no counted label anywhere adds nothing; dividing its zero sum
            // by 1 keeps it so, where 0 would turn the loss into NaN.
            scalar(n[0].clone()).max(1.0) * mbs as f64
        });
        Some(per.collect())
    }
}
