//! Gradient finalization on a sharded mesh: when the reduce-scatter acts. ZeRO-1 and ZeRO-3
//! (Megatron's distributed optimizer, FSDP) accumulate every microbatch's gradient whole and
//! reduce-scatter once; ZeRO-2 (DeepSpeed's stage 2) reduce-scatters each microbatch's and
//! accumulates the shards. The catalogued bugs of both live here.

use burn::tensor::Tensor;
use indexmap::IndexMap;

use super::finalize::sum_maps;
use super::MeshExec;
use crate::parallel::comm::collective::Comm;
use crate::parallel::zero::Sharded;

type Grads = Vec<IndexMap<String, Tensor<2>>>;

impl MeshExec<'_> {
    /// Each rank's gradient shard from its microbatches' gradients (`summed`: their sum).
    pub(super) fn reduce_sharded(
        &self,
        comm: &mut Comm,
        z: Sharded,
        params: &[IndexMap<String, Tensor<2>>],
        summed: Grads,
        parts: Vec<Vec<IndexMap<String, Tensor<2>>>>,
    ) -> Grads {
        let mbs = parts.first().map_or(1, Vec::len);
        let policy = comm.policies().grads;
        if z.stage() == 2 {
            let last_only = policy.zero2_last_microbatch_only && mbs > 1;
            if last_only {
                comm.event(
                    "grad.zero2.accumulate",
                    "accumulator reset at every backward: last microbatch only",
                );
            }
            let mut total: Option<Grads> = None;
            for m in 0..mbs {
                let one: Grads = parts.iter().map(|maps| maps[m].clone()).collect();
                let shards = self.reduce_grads(comm, params, one, Some(z));
                total = match total {
                    Some(acc) if !last_only => Some(add(acc, shards)),
                    _ => Some(shards),
                };
            }
            return total.expect("a step has a microbatch");
        }
        let unreduced = policy.zero1_last_microbatch_unreduced && z.stage() == 1 && mbs > 1;
        if !unreduced {
            return self.reduce_grads(comm, params, summed, Some(z));
        }
        comm.event(
            "grad.zero1.accumulate",
            "reduced before the last microbatch, which each rank adds from its own data",
        );
        let head: Grads = parts
            .iter()
            .map(|maps| sum_maps(&maps[..mbs - 1]))
            .collect();
        let mut shards = self.reduce_grads(comm, params, head, Some(z));
        for (rank, held) in shards.iter_mut().enumerate() {
            for (name, g) in held.iter_mut() {
                *g = g.clone() + z.chunk(rank, name, &parts[rank][mbs - 1][name]);
            }
        }
        shards
    }
}

/// Two ranks' worth of shards added name by name.
fn add(mut acc: Grads, more: Grads) -> Grads {
    for (a, m) in acc.iter_mut().zip(more) {
        for (n, g) in m {
            a[&n] = a[&n].clone() + g;
        }
    }
    acc
}
