//! Traces of every parameter's gradient (as accumulated, as finalized) and of the parameters
//! a step computes with, canonicalized per sharding rule: what localization compares with the
//! reference's, and the per-replica parts (`SITE%`) a likely cause is tested against.

use burn::tensor::Tensor;
use indexmap::IndexMap;

use super::MeshExec;
use crate::llama::is_buffer;
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::trace::{canon, Canon, Value};
use crate::sharding::{Placement, ShardingPlan};

impl MeshExec<'_> {
    /// Trace every parameter's gradient as accumulated (summed over its replicas, merged over
    /// its blocks: what the whole batch's gradient is) or as finalized (each replica's copy,
    /// merged over its blocks).
    pub(super) fn trace_grads(
        &self,
        comm: &mut Comm,
        grads: &[IndexMap<String, Tensor<2>>],
        finalized: bool,
    ) {
        let what = if finalized { "dp" } else { "accumulated" };
        self.trace_rules(comm, grads, finalized, &|name| {
            format!("grad.{name}.{what}")
        });
    }

    /// Where a gradient has no replicas to split it into (dp·cp = 1), each microbatch's share
    /// of it as accumulated, at `grad.{name}.accumulated%` (not compared): what tells a
    /// microbatch that never reached the accumulator (finalized early, wiped by a reset) from
    /// any other wrong sum. `per_microbatch`: each rank's gradients, one map per microbatch
    /// (`finalize`'s computed shares, made only when the run traces).
    pub(super) fn trace_microbatch_parts(
        &self,
        comm: &mut Comm,
        per_microbatch: &[Vec<IndexMap<String, Tensor<2>>>],
    ) {
        let mbs = self.topo.microbatches();
        let replicas = self.topo.dp() * self.topo.cp();
        if mbs < 2 || replicas > 1 {
            return;
        }
        let shares: Vec<Vec<IndexMap<String, Tensor<2>>>> = (0..mbs)
            .map(|m| per_microbatch.iter().map(|maps| maps[m].clone()).collect())
            .collect();
        let mut parts: IndexMap<String, Vec<Value>> = IndexMap::new();
        for share in &shares {
            let mut traced = comm.fresh();
            self.trace_rules(&mut traced, share, false, &|name| {
                format!("grad.{name}.accumulated%")
            });
            for mut r in traced.take_records() {
                parts.entry(r.site).or_default().append(&mut r.copies);
            }
        }
        for (site, values) in parts {
            comm.trace_values(&site, values);
        }
    }

    /// Trace every parameter as the step computes with it (each replica's copy, merged over
    /// its blocks), at `param.{name}`: where a stale or wrong unshard shows.
    pub fn trace_params(&self, comm: &mut Comm, params: &[IndexMap<String, Tensor<2>>]) {
        self.trace_rules(comm, params, true, &|name| format!("param.{name}"));
    }

    /// Trace every parameter's AdamW first moment after the step's update (each replica's
    /// copy, merged over its blocks and shards), at `adam.{name}.m`: where a wrong optimizer
    /// state shows first.
    pub fn trace_moments(&self, comm: &mut Comm, moments: &[IndexMap<String, Tensor<2>>]) {
        self.trace_rules(comm, moments, true, &|name| format!("adam.{name}.m"));
    }

    /// Trace per-rank tensors of every parameter (not buffers) at `site(name)`: summed over
    /// replicas or (`copies`) each replica's.
    fn trace_rules(
        &self,
        comm: &mut Comm,
        grads: &[IndexMap<String, Tensor<2>>],
        finalized: bool,
        site: &dyn Fn(&str) -> String,
    ) {
        if !comm.tracing() {
            return;
        }
        let (tp, sp) = (self.topo.tp(), self.topo.sp());
        let plan = ShardingPlan::llama(self.model, self.topo.mesh());
        for rule in plan.rules.iter().filter(|r| !is_buffer(&r.name)) {
            // Holders of each block, in rank order: its replicas.
            let mut holders: Vec<Vec<usize>> = Vec::new();
            for rank in 0..grads.len() {
                if let Some(b) = plan.block(rule, rank) {
                    if holders.len() <= b {
                        holders.resize(b + 1, Vec::new());
                    }
                    holders[b].push(rank);
                }
            }
            let over_blocks = |per_block: Vec<Tensor<2>>| match rule.placement {
                // A padded vocabulary's blocks run past it: the padding is cut off.
                Placement::Split(dim) | Placement::Expert { dim, .. } => {
                    let whole = Tensor::cat(per_block, dim).narrow(dim, 0, rule.shape[dim]);
                    canon(&[whole], Canon::Copies, None, &[])
                }
                Placement::Replicated if sp && !finalized => {
                    canon(&per_block, Canon::Sum, None, &[])
                }
                Placement::Replicated => canon(&per_block, Canon::Copies, None, &[]),
            };
            // Replicated weights: the TP ranks are blocks of a partial sum or copies.
            let (blocks, copies) = match rule.placement {
                Placement::Replicated => {
                    let by_tp: Vec<Vec<usize>> = (0..tp)
                        .map(|t| {
                            holders[0]
                                .iter()
                                .copied()
                                .filter(|&r| self.topo.coord(r).tp == t)
                                .collect()
                        })
                        .collect();
                    holders = by_tp;
                    (tp, holders[0].len())
                }
                _ => (holders.len(), holders[0].len()),
            };
            let at = |b: usize, d: usize| grads[holders[b][d]][&rule.name].clone();
            let values: Vec<Value> = if finalized {
                (0..copies)
                    .flat_map(|d| over_blocks((0..blocks).map(|b| at(b, d)).collect()))
                    .collect()
            } else {
                let summed = (0..blocks).map(|b| {
                    let mut it = (0..copies).map(|d| at(b, d));
                    let first = it.next().expect("every block has a holder");
                    it.fold(first, |a, b| a + b)
                });
                over_blocks(summed.collect())
            };
            comm.trace_values(&site(&rule.name), values);
            // An accumulated gradient is the sum of its replicas': each one's, at `{site}%`
            // (not compared), for a likely cause (one replica's share scaled or missing).
            if !finalized && copies > 1 {
                let parts = (0..copies)
                    .filter_map(|d| over_blocks((0..blocks).map(|b| at(b, d)).collect()).pop())
                    .collect();
                comm.trace_values(&format!("{}%", site(&rule.name)), parts);
            }
        }
    }
}
