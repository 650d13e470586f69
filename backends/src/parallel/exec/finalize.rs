//! Gradient finalization: what happens to the accumulated gradients before the optimizer. The
//! wrong-scale faults, the SP all-reduce across TP of replicated weights used on sequence shards
//! (norms, router), the all-reduce of every dense gradient over the data-parallel group (cp
//! ranks included) and, under expert parallelism, of every expert's gradient over its
//! expert-data-parallel group (Megatron's edp: the ranks holding the same expert shard).

use burn::tensor::Tensor;
use indexmap::IndexMap;

use super::MeshExec;
use crate::llama::is_buffer;
use crate::parallel::comm::collective::Comm;
use crate::parallel::zero::{self, Sharded};

type Grads = Vec<IndexMap<String, Tensor<2>>>;
/// A rank's gradients of the microbatches that never reached its accumulator, by microbatch.
pub(super) type Lost = Vec<(usize, IndexMap<String, Tensor<2>>)>;

fn is_expert(name: &str) -> bool {
    name.contains(".mlp.experts.")
}

impl MeshExec<'_> {
    /// Gradients as the optimizer sees them, from each rank's accumulated gradients (one map
    /// per microbatch on a sharded mesh, else one summed map): whole, or on a sharded mesh
    /// each rank's flat shard.
    pub(super) fn finalize(
        &self,
        comm: &mut Comm,
        params: &[IndexMap<String, Tensor<2>>],
        acc: Vec<Vec<IndexMap<String, Tensor<2>>>>,
        lost: Vec<Lost>,
    ) -> Grads {
        let world = params.len();
        let mut parts: Vec<Vec<IndexMap<String, Tensor<2>>>> = params
            .iter()
            .zip(acc)
            .map(|(p, maps)| {
                let maps = if maps.is_empty() {
                    vec![IndexMap::new()]
                } else {
                    maps
                };
                maps.into_iter().map(|mut a| filled(p, &mut a)).collect()
            })
            .collect();
        for (rank, maps) in parts.iter_mut().enumerate() {
            if let Some(scale) = comm.policies().grads.rank_scale(rank, world) {
                comm.event(
                    &format!("grad.rank{rank}.scale"),
                    "scaled by a wrong factor",
                );
                for g in maps.iter_mut().flat_map(IndexMap::values_mut) {
                    *g = g.clone() * scale;
                }
            }
        }
        let summed: Grads = parts.iter().map(|maps| sum_maps(maps)).collect();
        self.trace_grads(comm, &summed, false);
        if comm.tracing() {
            let computed = computed_shares(params, &parts, lost, self.topo.microbatches());
            self.trace_microbatch_parts(comm, &computed);
        }
        let grads = match Sharded::of(&self.topo) {
            None => self.reduce_grads(comm, params, summed, None),
            Some(z) => self.reduce_sharded(comm, z, params, summed, parts),
        };
        match Sharded::of(&self.topo) {
            Some(z) if comm.tracing() => {
                let whole = z.gather(None, &grads, &zero::dims(&grads_like(params)));
                self.trace_grads(comm, &whole, true);
            }
            _ => self.trace_grads(comm, &grads, true),
        }
        grads
    }

    /// The reductions of one set of accumulated gradients: the SP all-reduce across TP of
    /// replicated weights used on sequence shards, then over the data-parallel group (cp ranks
    /// included) an all-reduce, or on a sharded mesh a reduce-scatter over each shard group
    /// and an all-reduce of each shard across hybrid replicas; then the experts'.
    pub(super) fn reduce_grads(
        &self,
        comm: &mut Comm,
        params: &[IndexMap<String, Tensor<2>>],
        mut grads: Grads,
        sharded: Option<Sharded>,
    ) -> Grads {
        let t = &self.topo;
        let cp_skipped = comm.policies().grads.cp_reduce_skipped;
        if cp_skipped {
            comm.event(
                "grad.dp_cp.all_reduce",
                "reduced over dp only, cp ranks left out",
            );
        }
        for s in 0..t.pp() {
            if t.sp() {
                self.reduce_sequence_parallel(comm, params, &mut grads, s);
            }
            self.reduce_data_parallel(comm, params, &mut grads, s, sharded, cp_skipped);
            if t.experts().parallel() {
                self.reduce_experts(comm, &mut grads, s, sharded);
            }
        }
        if self.model.embedding_on_last_stage() {
            self.reduce_tied_embedding(comm, &mut grads, sharded);
        }
        if let Some(z) = sharded {
            // What a reduction left whole (a catalogued bug's own path): the rank's shard of it.
            for (rank, held) in grads.iter_mut().enumerate() {
                for (name, g) in held.iter_mut() {
                    let whole = params[rank][name].dims();
                    if !z.is_chunk(rank, name, g, whole) {
                        *g = z.chunk(rank, name, g);
                    }
                }
            }
        }
        grads
    }

    /// Stage `s`'s replicated weights used on sequence shards (norms, the router, experts
    /// replicated over TP, the MTP projection): each TP rank holds a partial gradient, all-reduced across TP.
    fn reduce_sequence_parallel(
        &self,
        comm: &mut Comm,
        params: &[IndexMap<String, Tensor<2>>],
        grads: &mut Grads,
        s: usize,
    ) {
        let t = &self.topo;
        let experts_parallel = t.experts().parallel();
        for (c, d) in (0..t.dp()).flat_map(|d| (0..t.cp()).map(move |c| (c, d))) {
            let ranks = t.tp_group(c, d, s);
            let norms = params[ranks[0]]
                .keys()
                .filter(|n| !is_buffer(n))
                .filter(|n| {
                    n.contains("norm")
                        || n.starts_with("mtp.")
                        || n.contains(".router.")
                        || (is_expert(n) && !experts_parallel)
                })
                .cloned()
                .collect();
            all_reduce(comm, grads, &ranks, norms, "tp");
        }
    }

    /// Stage `s`'s dense gradients over the data-parallel group (cp ranks included): an
    /// all-reduce, or on a sharded mesh a reduce-scatter over each shard group and an
    /// all-reduce of each shard across hybrid replicas (with the catalogued bug, over dp only).
    fn reduce_data_parallel(
        &self,
        comm: &mut Comm,
        params: &[IndexMap<String, Tensor<2>>],
        grads: &mut Grads,
        s: usize,
        sharded: Option<Sharded>,
        cp_skipped: bool,
    ) {
        let t = &self.topo;
        let experts_parallel = t.experts().parallel();
        for tp in 0..t.tp() {
            let group = t.dp_cp_group(tp, s);
            let names: Vec<String> = params[group[0]]
                .keys()
                .filter(|n| !is_buffer(n))
                .filter(|n| !(experts_parallel && is_expert(n)))
                .cloned()
                .collect();
            if cp_skipped {
                for c in 0..t.cp() {
                    let ranks = t.dp_group(tp, c, s);
                    all_reduce(comm, grads, &ranks, names.clone(), "dp");
                }
            } else if let Some(z) = sharded {
                for shard in t.shard_groups(tp, s) {
                    z.reduce_scatter(comm, grads, &shard, &names, "dp");
                }
                for copies in t.replicate_groups(tp, s) {
                    all_reduce(comm, grads, &copies, names.clone(), "replicate");
                }
            } else {
                all_reduce(comm, grads, &group, names, "dp");
            }
        }
    }

    /// The tied embedding's two copies (first stage: the lookup's gradient; last stage: the
    /// output head's) all-reduced over each embedding group, after the data-parallel
    /// reduction as Megatron's `_allreduce_embedding_grads` does.
    fn reduce_tied_embedding(&self, comm: &mut Comm, grads: &mut Grads, sharded: Option<Sharded>) {
        let t = &self.topo;
        let name = vec!["embed.weight".to_owned()];
        let mut groups = t.embedding_groups();
        let shifted = sharded.is_some() && comm.policies().grads.tied_shards_mismatched;
        if shifted {
            // The catalogued bug: each stage's shard of the embedding at its own buffer
            // offset, so a first-stage shard meets the next shard of the last stage's.
            comm.event(
                "grad.embed.weight.embedding.all_reduce",
                "first- and last-stage shards at different offsets",
            );
            for g in &mut groups {
                if let Some(shard) = t.shard_group(g[1], false) {
                    g[1] = shard.ranks[(shard.index + 1) % shard.ranks.len()];
                }
            }
        }
        for group in groups {
            all_reduce(comm, grads, &group, name.clone(), "embedding");
        }
    }

    /// Stage `s`'s expert gradients all-reduced over each expert-data-parallel group (or, with
    /// the catalogued bugs, over the dense data-parallel group, or not at all).
    fn reduce_experts(
        &self,
        comm: &mut Comm,
        grads: &mut Grads,
        s: usize,
        sharded: Option<Sharded>,
    ) {
        let policy = comm.policies().grads;
        if policy.expert_sync_skipped {
            comm.event(
                "grad.experts.edp.all_reduce",
                "expert gradients never synced",
            );
            return;
        }
        if policy.expert_dense_group {
            self.reduce_experts_over_dense_dp(comm, grads, s);
            return;
        }
        let t = &self.topo;
        let overscaled = policy.experts_scaled_by_ep;
        if overscaled {
            comm.event(
                "grad.experts.edp.all_reduce",
                "expert gradients scaled as if each rank contributed only its own tokens: ep times too large",
            );
        }
        for members in t.edp_groups(s) {
            let names: Vec<String> = grads[members[0]]
                .keys()
                .filter(|n| is_expert(n))
                .cloned()
                .collect();
            match sharded {
                Some(z) => z.reduce_scatter(comm, grads, &members, &names, "edp"),
                None => all_reduce(comm, grads, &members, names, "edp"),
            }
            if overscaled {
                let ep = t.experts().ep as f64;
                for &r in &members {
                    for g in grads[r]
                        .iter_mut()
                        .filter(|(n, _)| is_expert(n))
                        .map(|(_, g)| g)
                    {
                        *g = g.clone() * ep;
                    }
                }
            }
        }
    }

    /// The catalogued bug: stage `s`'s expert gradients all-reduced over the dense
    /// data-parallel group, as flat buffers summed position by position.
    fn reduce_experts_over_dense_dp(&self, comm: &mut Comm, grads: &mut Grads, s: usize) {
        let t = &self.topo;
        let ranks = t.whole_stage(s).ranks;
        let n = ranks.len();
        comm.event(
            "grad.experts.dp.all_reduce",
            "expert gradients reduced over the dense data-parallel group",
        );
        // The dense dp group (same tp index), each member's k-th expert tensor with the
        // others' k-th: flat gradient buffers summed position by position.
        for tp in 0..t.tp() {
            let members: Vec<usize> = (0..n)
                .filter(|j| j % t.tp() == tp)
                .map(|j| ranks[j])
                .collect();
            let names: Vec<Vec<String>> = members
                .iter()
                .map(|&r| grads[r].keys().filter(|n| is_expert(n)).cloned().collect())
                .collect();
            for k in 0..names[0].len() {
                let parts = members
                    .iter()
                    .zip(&names)
                    .map(|(&r, held)| grads[r][&held[k]].clone())
                    .collect();
                let site = format!("grad.{}.dp.all_reduce", names[0][k]);
                for ((&r, held), g) in members
                    .iter()
                    .zip(&names)
                    .zip(comm.all_reduce_sum(&site, &members, parts))
                {
                    grads[r][&held[k]] = g;
                }
            }
        }
    }
}

/// A rank's accumulated gradients with a zero gradient for every parameter it got none for.
fn filled(
    params: &IndexMap<String, Tensor<2>>,
    acc: &mut IndexMap<String, Tensor<2>>,
) -> IndexMap<String, Tensor<2>> {
    params
        .iter()
        .filter(|(n, _)| !is_buffer(n))
        .map(|(n, t)| {
            let g = acc.swap_remove(n).unwrap_or_else(|| t.zeros_like());
            (n.clone(), g)
        })
        .collect()
}

/// Each rank's gradient of each microbatch as computed: what reached the accumulator (its
/// slot in `parts`) or, for a microbatch that never did, what was lost.
fn computed_shares(
    params: &[IndexMap<String, Tensor<2>>],
    parts: &[Vec<IndexMap<String, Tensor<2>>>],
    lost: Vec<Lost>,
    mbs: usize,
) -> Vec<Vec<IndexMap<String, Tensor<2>>>> {
    params
        .iter()
        .zip(parts)
        .zip(lost)
        .map(|((p, kept), lost)| {
            // A rank of several model chunks (interleaved) loses each chunk's share apart.
            let mut by_mb: Vec<Option<IndexMap<String, Tensor<2>>>> = vec![None; mbs];
            for (mb, share) in lost {
                by_mb[mb].get_or_insert_with(IndexMap::new).extend(share);
            }
            by_mb
                .into_iter()
                .enumerate()
                .map(|(m, lost)| match lost {
                    Some(mut share) => filled(p, &mut share),
                    None => kept
                        .get(m)
                        .cloned()
                        .unwrap_or_else(|| filled(p, &mut IndexMap::new())),
                })
                .collect()
        })
        .collect()
}

/// Microbatches' gradients summed in microbatch order (one map: itself).
pub(super) fn sum_maps(maps: &[IndexMap<String, Tensor<2>>]) -> IndexMap<String, Tensor<2>> {
    let mut it = maps.iter();
    let mut out = it.next().cloned().unwrap_or_default();
    for m in it {
        for (n, g) in m {
            out[n] = out[n].clone() + g.clone();
        }
    }
    out
}

/// Parameters without buffers: the shapes gradients have.
fn grads_like(params: &[IndexMap<String, Tensor<2>>]) -> Grads {
    params
        .iter()
        .map(|p| {
            p.iter()
                .filter(|(n, _)| !is_buffer(n))
                .map(|(n, t)| (n.clone(), t.clone()))
                .collect()
        })
        .collect()
}

/// Each of `names` all-reduced over `ranks`, logged at `grad.{name}.{group}.all_reduce`.
pub(super) fn all_reduce(
    comm: &mut Comm,
    grads: &mut Grads,
    ranks: &[usize],
    names: Vec<String>,
    group: &str,
) {
    for name in names {
        let parts = ranks.iter().map(|&r| grads[r][&name].clone()).collect();
        let site = format!("grad.{name}.{group}.all_reduce");
        for (&r, g) in ranks.iter().zip(comm.all_reduce_sum(&site, ranks, parts)) {
            grads[r][&name] = g;
        }
    }
}
