//! The global gradient norm and clipping by it, as a mesh computes them.
//!
//! On one device the norm is the L2 norm over every parameter's gradient. On a mesh no rank
//! holds every gradient, so (as Megatron's `get_grad_norm_fp32` and torch's `clip_grad_norm_`
//! over DTensors do) each rank sums the squares of what it holds and the sums are all-reduced
//! over the ranks holding *different* parts of the model:
//! - dense parameters over the TP × PP ranks of one (dp, cp) replica, a parameter replicated
//!   over TP (norm weights, the router) counted on TP rank 0 only (Megatron's
//!   `param_is_not_tensor_parallel_duplicate`);
//! - expert parameters, under expert parallelism, over the expert-TP × EP × PP ranks of one
//!   expert-data-parallel replica.
//!
//! On a sharded mesh (ZeRO) each rank holds a flat shard of its gradients, and the sums run
//! over the ranks that together hold one copy of every shard (every rank, or each hybrid
//! replica's). Data- and context-parallel ranks hold the same finalized gradients, so every rank ends with
//! the world-size-1 norm. Each rank then scales its gradients by max/(norm + 1e-6) where that is
//! below one (torch's and Megatron's formula). The norm is traced at `grad_norm` (one copy per
//! rank) and reported from the last rank, where Megatron logs it.

use std::collections::HashMap;

use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use indexmap::IndexMap;

use super::{count_dtype, scalar, MeshExec};
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::trace::Value;
use crate::sharding::{Placement, ShardingPlan};

/// Per-rank gradients.
type Grads = Vec<IndexMap<String, Tensor<2>>>;

/// The `+ eps` of the clip coefficient's denominator (torch and Megatron).
pub const EPS: f64 = 1e-6;

/// The factor gradients are scaled by at global norm `norm`, when clipping changes them.
pub fn coefficient(norm: f64, max: Option<f64>) -> Option<f64> {
    let c = max? / (norm + EPS);
    (c < 1.0).then_some(c)
}

/// Σ g² of one gradient, accumulated in f32 at least (Megatron's fp32 main gradients; a bf16
/// sum of squares would lose the norm to its own round-off).
pub fn sum_sq(g: &Tensor<2>) -> f64 {
    let g = match g.dtype() {
        DType::F64 | DType::F32 => g.clone(),
        _ => g.clone().cast(FloatDType::F32),
    };
    scalar(g.powi_scalar(2).sum())
}

/// The world-size-1 norm: every gradient once.
pub fn global_norm(grads: &IndexMap<String, Tensor<2>>) -> f64 {
    grads.values().map(sum_sq).sum::<f64>().sqrt()
}

/// Scale every gradient by the clip coefficient, if clipping changes them.
pub fn apply(grads: &mut IndexMap<String, Tensor<2>>, norm: f64, max: Option<f64>) {
    if let Some(c) = coefficient(norm, max) {
        for g in grads.values_mut() {
            *g = g.clone() * c;
        }
    }
}

impl MeshExec<'_> {
    /// Each rank's global gradient norm (traced at `grad_norm`), and its gradients clipped by
    /// it when the run clips.
    pub(super) fn clip(&self, comm: &mut Comm, grads: &mut Grads) -> Vec<f64> {
        let world = grads.len();
        let plan = ShardingPlan::llama(self.model, self.topo.mesh());
        let placement: HashMap<&str, Placement> = plan
            .rules
            .iter()
            .map(|r| (r.name.as_str(), r.placement))
            .collect();
        // The catalogued bug: TP-replicated parameters enter every TP rank's sum.
        let duplicates = comm.policies().grads.norm_counts_tp_duplicates;
        if duplicates && self.topo.tp() > 1 {
            comm.event(
                "grad_norm",
                "TP-replicated parameters counted on every TP rank",
            );
        }
        let (mut dense, mut experts) = (vec![0.0; world], vec![0.0; world]);
        let last = self.topo.pp() - 1;
        for (rank, held) in grads.iter().enumerate() {
            let tp0 = self.topo.coord(rank).tp == 0;
            // A tied embedding's last-stage copy is the first stage's: counted there only
            // (Megatron's `param_is_not_shared`).
            let copy = self.model.embedding_on_last_stage()
                && last > 0
                && self.topo.coord(rank).pp == last;
            for (name, g) in held {
                if copy && name == "embed.weight" {
                    continue;
                }
                match placement.get(name.as_str()) {
                    Some(Placement::Expert { .. }) => experts[rank] += sum_sq(g),
                    Some(Placement::Replicated) if !tp0 && !duplicates => {}
                    _ => dense[rank] += sum_sq(g),
                }
            }
        }
        // On a sharded mesh each rank holds a shard of its parameters' gradients: the ranks
        // holding one copy of every shard sum together.
        let dense_groups = if self.topo.zero() > 0 {
            self.topo.sharded_model_groups()
        } else {
            self.topo.model_groups()
        };
        let dense = self.reduce_sums(comm, "grad_norm.dense", &dense_groups, dense);
        let experts = if self.topo.experts().parallel() {
            let groups = self.expert_model_groups(comm);
            self.reduce_sums(comm, "grad_norm.experts", &groups, experts)
        } else {
            experts
        };
        let norms: Vec<f64> = dense
            .iter()
            .zip(&experts)
            .map(|(d, e)| (d + e).sqrt())
            .collect();
        let copies = norms.iter().map(|&n| Value {
            shape: vec![1],
            data: vec![n],
        });
        comm.trace_values("grad_norm", copies.collect());
        for (held, &norm) in grads.iter_mut().zip(&norms) {
            apply(held, norm, self.clip_grad_norm);
        }
        norms
    }

    /// The ranks holding different expert shards ([`Topology::expert_model_groups`]); with
    /// the catalogued bug, without the EP axis.
    ///
    /// [`Topology::expert_model_groups`]: super::Topology::expert_model_groups
    fn expert_model_groups(&self, comm: &mut Comm) -> Vec<Vec<usize>> {
        let missing_ep = comm.policies().grads.norm_misses_ep;
        if missing_ep {
            comm.event(
                "grad_norm.experts",
                "expert norm not reduced over the expert-parallel axis",
            );
        }
        if self.topo.zero() > 0 {
            self.topo.sharded_expert_groups(missing_ep)
        } else {
            self.topo.expert_model_groups(missing_ep)
        }
    }

    /// Per-rank sums all-reduced over each of `groups` (which partition the ranks), at
    /// `{site}.all_reduce`.
    fn reduce_sums(
        &self,
        comm: &mut Comm,
        site: &str,
        groups: &[Vec<usize>],
        mut sums: Vec<f64>,
    ) -> Vec<f64> {
        let dtype = count_dtype(self.device);
        for group in groups {
            let mut ranks = group.clone();
            ranks.sort_unstable();
            let parts = ranks
                .iter()
                .map(|&r| {
                    Tensor::<1>::from_data(
                        TensorData::new(vec![sums[r]], [1]),
                        (self.device, dtype),
                    )
                })
                .collect();
            let reduced = comm.all_reduce_sum(&format!("{site}.all_reduce"), &ranks, parts);
            for (&r, t) in ranks.iter().zip(reduced) {
                sums[r] = scalar(t);
            }
        }
        sums
    }
}
