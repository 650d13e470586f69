//! Sharded data parallelism (ZeRO stages 1–3, FSDP, hybrid sharding) on simulated ranks.
//!
//! Each parameter a rank holds whole (its TP/EP block) is also cut into flat shards over the
//! rank's shard group ([`Topology::shard_group`]): gradients are reduce-scattered so each
//! rank keeps the sum of its shard (then all-reduced across hybrid replicas), each rank's
//! optimizer updates only its shard and keeps only its shard's state, and the updated shards
//! are all-gathered back into whole parameters — after the update (ZeRO-1/2, Megatron's
//! distributed optimizer) or before the next step's forward (ZeRO-3, FSDP2's unshard).
//!
//! - `flat.rs` — a tensor's padded flat shards, and back;
//! - `checkpoint.rs` — a ZeRO-3 checkpoint in the mesh's own layout, and its merge.

pub mod checkpoint;
pub mod flat;

use burn::tensor::Tensor;
use indexmap::IndexMap;

use crate::parallel::comm::collective::Comm;
use crate::parallel::topology::{ShardGroup, Topology};

/// Per-rank tensors by parameter name.
pub type Ranks = Vec<IndexMap<String, Tensor<2>>>;

/// Per-rank whole shapes of the parameters, for putting shards back.
pub type Dims = Vec<IndexMap<String, [usize; 2]>>;

/// Buffers (the router's score-correction bias) are state outside the optimizer: never
/// sharded.
fn is_buffer(name: &str) -> bool {
    crate::llama::is_buffer(name)
}

/// An expert's weight (sharded over its expert-data-parallel group under expert parallelism).
fn is_expert(name: &str) -> bool {
    name.contains(".mlp.experts.")
}

/// A mesh's sharding, if it shards (zero ≥ 1).
#[derive(Clone, Copy, Debug)]
pub struct Sharded<'a> {
    topo: &'a Topology,
}

impl<'a> Sharded<'a> {
    pub fn of(topo: &'a Topology) -> Option<Self> {
        (topo.zero() > 0).then_some(Self { topo })
    }

    /// The ZeRO stage.
    pub fn stage(&self) -> u32 {
        self.topo.zero()
    }

    /// The group `rank` shards `name` over.
    pub fn group(&self, rank: usize, name: &str) -> ShardGroup {
        self.topo
            .shard_group(rank, is_expert(name))
            .expect("a sharded mesh has a shard group for every rank")
    }

    /// `rank`'s shard of its whole tensor `t` of `name` (a local slice, no communication).
    pub fn chunk(&self, rank: usize, name: &str, t: &Tensor<2>) -> Tensor<2> {
        let g = self.group(rank, name);
        flat::chunk(t, g.ranks.len(), g.index)
    }

    /// Whether `t` is already `rank`'s shard of `name` (and not the whole tensor).
    pub fn is_chunk(&self, rank: usize, name: &str, t: &Tensor<2>, whole: [usize; 2]) -> bool {
        let k = self.group(rank, name).ranks.len();
        t.dims() == [1, flat::width(whole[0] * whole[1], k)] && (k > 1 || t.dims() == whole)
    }

    /// Every parameter of one rank cut to its shard; buffers kept whole.
    pub fn shard(
        &self,
        rank: usize,
        params: &IndexMap<String, Tensor<2>>,
    ) -> IndexMap<String, Tensor<2>> {
        params
            .iter()
            .map(|(n, t)| {
                let t = if is_buffer(n) {
                    t.clone()
                } else {
                    self.chunk(rank, n, t)
                };
                (n.clone(), t)
            })
            .collect()
    }

    /// Reduce-scatter each of `names` over `ranks` (one shard group): member i keeps the sum of
    /// shard i, logged at `grad.{name}.{group}.reduce_scatter`. With the catalogued bug, each
    /// member keeps its neighbour's shard (reduce-scatter and optimizer disagree on offsets).
    pub fn reduce_scatter(
        &self,
        comm: &mut Comm,
        grads: &mut Ranks,
        ranks: &[usize],
        names: &[String],
        group: &str,
    ) {
        let k = ranks.len();
        let shifted = k > 1 && comm.policies().grads.zero_shard_misaligned;
        for name in names {
            let parts = ranks
                .iter()
                .map(|&r| flat::padded(&grads[r][name], k))
                .collect();
            let site = format!("grad.{name}.{group}.reduce_scatter");
            let mut out = comm.reduce_scatter(&site, ranks, parts, 1);
            if shifted {
                comm.event(&site, "each rank kept its neighbour's shard");
                out.rotate_left(1);
            }
            for (&r, g) in ranks.iter().zip(out) {
                grads[r][name] = g;
            }
        }
    }

    /// Every rank's whole parameters from every rank's shards (buffers copied through): an
    /// all-gather per parameter and shard group at `zero.{name}.all_gather`, or, without a
    /// communicator, the same merge unlogged (what a record or a checkpoint reader does).
    pub fn gather(&self, mut comm: Option<&mut Comm>, shards: &Ranks, dims: &Dims) -> Ranks {
        let mut out: Ranks = vec![IndexMap::new(); shards.len()];
        for (rank, held) in shards.iter().enumerate() {
            for (name, t) in held {
                if is_buffer(name) {
                    out[rank].insert(name.clone(), t.clone());
                    continue;
                }
                let g = self.group(rank, name);
                if g.index != 0 {
                    continue;
                }
                let parts = g.ranks.iter().map(|&r| shards[r][name].clone()).collect();
                let rows = match comm.as_deref_mut() {
                    Some(c) => c.all_gather(&format!("zero.{name}.all_gather"), &g.ranks, parts, 1),
                    None => vec![Tensor::cat(parts, 1); g.ranks.len()],
                };
                for (&r, row) in g.ranks.iter().zip(rows) {
                    out[r].insert(name.clone(), flat::unflat(row, dims[r][name]));
                }
            }
        }
        // Back in each rank's own parameter order.
        out.iter_mut()
            .zip(shards)
            .for_each(|(o, s)| o.sort_by_cached_key(|n, _| s.get_index_of(n)));
        out
    }
}

impl Sharded<'_> {
    /// ZeRO-3's unshard before a step: every rank's whole parameters all-gathered from the
    /// shards. With the catalogued bug, the first layer's unshard is a no-op after the first
    /// step: it keeps the parameters gathered before the last update (`previous`).
    pub fn unshard(
        &self,
        comm: &mut Comm,
        shards: &Ranks,
        dims: &Dims,
        previous: Option<&Ranks>,
    ) -> Ranks {
        let mut out = self.gather(Some(comm), shards, dims);
        let Some(prev) = previous else {
            return out;
        };
        let policy = comm.policies().grads;
        let mut stale = false;
        for (now, before) in out.iter_mut().zip(prev) {
            for (name, t) in now.iter_mut() {
                if !is_buffer(name) && policy.stale_unshard(name) {
                    *t = before[name].clone();
                    stale = true;
                }
            }
        }
        if stale {
            comm.event(
                "zero.layers.0.all_gather",
                "unshard a no-op: parameters gathered before the last update",
            );
        }
        out
    }
}

impl Sharded<'_> {
    /// The parameters-in-use invariant of a ZeRO-3 step (what a hook comparing each module's
    /// unsharded parameters with its shards' all-gather checks): `None` when every rank's
    /// parameters are bit for bit the merge of the shards, else which differs first.
    pub fn stale(&self, step: usize, used: &Ranks, shards: &Ranks, dims: &Dims) -> Option<String> {
        let fresh = self.gather(None, shards, dims);
        for (rank, (u, f)) in used.iter().zip(&fresh).enumerate() {
            for (name, t) in u {
                if !is_buffer(name) && t.to_data().as_bytes() != f[name].to_data().as_bytes() {
                    return Some(format!(
                        "step {step}: rank {rank} computed with `{name}` unlike the all-gather \
                         of its shards (an unshard that did not happen)"
                    ));
                }
            }
        }
        None
    }
}

/// Each rank's whole parameter shapes.
pub fn dims(params: &Ranks) -> Dims {
    params
        .iter()
        .map(|p| p.iter().map(|(n, t)| (n.clone(), t.dims())).collect())
        .collect()
}
