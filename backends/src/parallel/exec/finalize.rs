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
use crate::parallel::comm::trace::{canon, Canon, Value};
use crate::parallel::zero::{self, Sharded};
use crate::sharding::{Placement, ShardingPlan};

type Grads = Vec<IndexMap<String, Tensor<2>>>;

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
            if let Some(scale) = comm.fault().and_then(|f| f.grad_scale(rank, world)) {
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
        let experts_parallel = t.experts().parallel();
        let cp_skipped = comm.fault().is_some_and(|f| f.cp_grad_reduce_skipped()) && t.cp() > 1;
        if cp_skipped {
            comm.event(
                "grad.dp_cp.all_reduce",
                "reduced over dp only, cp ranks left out",
            );
        }
        for s in 0..t.pp() {
            for (c, d) in (0..t.dp()).flat_map(|d| (0..t.cp()).map(move |c| (c, d))) {
                if t.sp() {
                    let ranks = t.tp_group(c, d, s);
                    // Replicated weights used on sequence shards: partial gradients per rank.
                    let norms = params[ranks[0]]
                        .keys()
                        .filter(|n| !is_buffer(n))
                        .filter(|n| {
                            n.contains("norm")
                                || n.contains(".router.")
                                || (is_expert(n) && !experts_parallel)
                        })
                        .cloned()
                        .collect();
                    all_reduce(comm, &mut grads, &ranks, norms, "tp");
                }
            }
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
                        all_reduce(comm, &mut grads, &ranks, names.clone(), "dp");
                    }
                } else if let Some(z) = sharded {
                    for shard in t.shard_groups(tp, s) {
                        z.reduce_scatter(comm, &mut grads, &shard, &names, "dp");
                    }
                    for copies in t.replicate_groups(tp, s) {
                        all_reduce(comm, &mut grads, &copies, names.clone(), "replicate");
                    }
                } else {
                    all_reduce(comm, &mut grads, &group, names, "dp");
                }
            }
            if experts_parallel {
                self.reduce_experts(comm, &mut grads, s, sharded);
            }
        }
        if self.model.tied() {
            // The tied embedding's two copies (first stage: the lookup's gradient; last stage:
            // the output head's) all-reduced over each embedding group, after the data-parallel
            // reduction as Megatron's `_allreduce_embedding_grads` does.
            let name = vec!["embed.weight".to_owned()];
            let mut groups = t.embedding_groups();
            let shifted =
                sharded.is_some() && comm.fault().is_some_and(|f| f.tied_shards_mismatched());
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
                all_reduce(comm, &mut grads, &group, name.clone(), "embedding");
            }
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

    /// Stage `s`'s expert gradients all-reduced over each expert-data-parallel group (or, with
    /// the catalogued bugs, over the dense data-parallel group, or not at all).
    fn reduce_experts(
        &self,
        comm: &mut Comm,
        grads: &mut Grads,
        s: usize,
        sharded: Option<Sharded>,
    ) {
        let fault = comm.fault();
        if fault.is_some_and(|f| f.expert_grad_sync_skipped()) {
            comm.event(
                "grad.experts.edp.all_reduce",
                "expert gradients never synced",
            );
            return;
        }
        let t = &self.topo;
        let ranks = t.whole_stage(s).ranks;
        let n = ranks.len();
        if fault.is_some_and(|f| f.expert_grad_dense_group()) {
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
            return;
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
        }
    }

    /// Trace every parameter's gradient as accumulated (summed over its replicas, merged over
    /// its blocks: what the whole batch's gradient is) or as finalized (each replica's copy,
    /// merged over its blocks).
    fn trace_grads(&self, comm: &mut Comm, grads: &[IndexMap<String, Tensor<2>>], finalized: bool) {
        let what = if finalized { "dp" } else { "accumulated" };
        self.trace_rules(comm, grads, finalized, &|name| {
            format!("grad.{name}.{what}")
        });
    }

    /// Trace every parameter as the step computes with it (each replica's copy, merged over
    /// its blocks), at `param.{name}`: where a stale or wrong unshard shows.
    pub fn trace_params(&self, comm: &mut Comm, params: &[IndexMap<String, Tensor<2>>]) {
        self.trace_rules(comm, params, true, &|name| format!("param.{name}"));
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
                Placement::Split(dim) | Placement::Expert { dim, .. } => {
                    canon(&per_block, Canon::Cat(dim), None)
                }
                Placement::Replicated if sp && !finalized => canon(&per_block, Canon::Sum, None),
                Placement::Replicated => canon(&per_block, Canon::Copies, None),
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
