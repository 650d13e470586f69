//! A run's mutation resolved once, when the run is built, into what each site does.
//!
//! The training path never asks "is this mutation injected?": the communicator, the stages'
//! layers, the gradient finalization and the optimizer hold a [`Policies`] and read their own
//! part of it — a flag, a factor, or a hook called unconditionally — whose default is the
//! correct computation. The [`Fault`] methods (this module's siblings) say what each catalogued
//! bug is, with its citations; [`Policies::of`] is the one place that asks them, and the sites
//! only ever see plain data. A run without a mutation holds `Policies::default()`.

use super::{Alteration, Fault, ForeignState, NormFault, TokenCount};
use crate::parallel::topology::Topology;

/// Every site's policy for one run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Policies {
    /// Which collective calls are altered, by site name (`comm/`).
    pub collectives: Collectives,
    /// How the data reaches the stages: the pipeline's chunks, the CP split, labels, the seed.
    pub data: Data,
    /// The computation of each layer (`layers/`).
    pub layers: Layers,
    /// The loss and what is logged of it.
    pub loss: Loss,
    /// Dropout's random streams.
    pub rng: Rng,
    /// Gradient accumulation, reduction and the global norm (`exec/`, `zero/`).
    pub grads: Grads,
    /// The optimizer's update and its schedule (`train/`).
    pub optimizer: Optimizer,
}

impl Policies {
    /// What `fault` does at each site of a run on `topo`; the correct run's policies without one.
    pub fn of(fault: Option<Fault>, topo: &Topology) -> Policies {
        let Some(f) = fault else {
            return Policies::default();
        };
        Policies {
            collectives: Collectives { fault },
            data: Data {
                chunks_reversed: topo.chunks() > 1 && f.chunks_reversed(),
                thd_split_by_rows: topo.cp() > 1 && f.thd_split_by_rows(),
                rolls_labels_per_cp_shard: topo.cp() > 1 && f.rolls_labels_per_cp_shard(),
                mtp_rolled_per_cp_shard: topo.cp() > 1 && f.mtp_rolled_per_cp_shard(),
                ring_crosses_documents: f.ring_crosses_documents(),
                positions_from_chunks: topo.cp() > 1 && f.packed_positions_from_chunks(),
                unpadded_boundaries: topo.cp() > 1 && f.thd_unpadded_boundaries(),
                init_seeded_per_dp_rank: topo.dp() > 1 && f.init_seeded_per_dp_rank(),
            },
            layers: Layers { fault },
            loss: Loss {
                gathers_logits_before_loss: topo.tp() > 1 && f.gathers_logits_before_loss(),
                smooths_over_local_vocab: f.smooths_over_local_vocab(),
                leaves_vocab_padding_unmasked: f.leaves_vocab_padding_unmasked(),
                scales_loss_grad_by_cp: topo.cp() > 1 && f.scales_loss_grad_by_cp(),
                mtp_scaled_down_by_cp: topo.cp() > 1 && f.mtp_loss_scaled_down_by_cp(),
                normalizes_per_microbatch: topo.microbatches() > 1 && f.normalizes_per_microbatch(),
                logs_microbatch_sum: topo.microbatches() > 1 && f.logs_microbatch_sum(),
            },
            rng: Rng {
                shared_across_tp: f.dropout_shared_across_tp(),
                shared_across_cp: f.dropout_shared_across_cp(),
                forked_in_replicated_region: f.dropout_forked_in_replicated_region(),
                recompute_not_restored: topo.tp() > 1 && f.recompute_rng_not_restored(),
            },
            grads: Grads {
                fault,
                cp_reduce_skipped: topo.cp() > 1 && f.cp_grad_reduce_skipped(),
                tied_shards_mismatched: f.tied_shards_mismatched(),
                expert_sync_skipped: f.expert_grad_sync_skipped(),
                expert_dense_group: f.expert_grad_dense_group(),
                experts_scaled_by_ep: topo.experts().ep > 1 && f.expert_grads_scaled_by_ep(),
                norm_counts_tp_duplicates: f.norm_counts_tp_duplicates(),
                norm_misses_ep: topo.experts().ep > 1 && f.norm_misses_ep(),
                zero_shard_misaligned: f.zero_shard_misaligned(),
                zero2_last_microbatch_only: f.zero2_last_microbatch_only(),
                zero1_last_microbatch_unreduced: f.zero1_last_microbatch_unreduced(),
                pipelined: topo.pp() > 1,
            },
            optimizer: Optimizer {
                decays_exempt_shards: f.decays_exempt_shards(),
                foreign_state: f.foreign_optimizer_state(),
                schedule_extra_steps: f.schedule_extra_steps(topo.microbatches()),
            },
        }
    }
}

/// The collectives' policy: what happens to the call at a site.
#[derive(Clone, Copy, Debug, Default)]
pub struct Collectives {
    fault: Option<Fault>,
}

impl Collectives {
    /// How the call at `site` (a full site name such as `layers.0.mlp.down.fwd.all_reduce`)
    /// is altered; `None`: it runs as written.
    pub fn alter(&self, site: &str) -> Option<Alteration> {
        self.fault.and_then(|f| f.alter(site))
    }
}

/// How the data reaches the stages.
#[derive(Clone, Copy, Debug, Default)]
pub struct Data {
    /// A pipeline rank runs its model chunks in reverse order (interleaved schedules only).
    pub chunks_reversed: bool,
    /// Padded documents cut by the row-level CP split (cp > 1).
    pub thd_split_by_rows: bool,
    /// Labels rolled on each CP rank's own tokens (cp > 1).
    pub rolls_labels_per_cp_shard: bool,
    /// The MTP layer's inputs and labels rolled on each CP rank's own share (cp > 1).
    pub mtp_rolled_per_cp_shard: bool,
    /// The ring masks the chunks it receives without their documents' boundaries.
    pub ring_crosses_documents: bool,
    /// RoPE's positions restart at each of the rank's CP chunks (cp > 1; packed rows).
    pub positions_from_chunks: bool,
    /// The documents' boundaries come from their unpadded lengths (cp > 1; padded documents).
    pub unpadded_boundaries: bool,
    /// The initial weights are drawn per data-parallel rank (dp > 1).
    pub init_seeded_per_dp_rank: bool,
}

/// The layers' policy: what is wrong in layer `l`'s computation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Layers {
    fault: Option<Fault>,
}

/// What is wrong in one layer's computation; the default is the correct layer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Layer {
    /// The attention norm of the one faulty rank.
    pub norm: Option<NormFault>,
    /// The attention residual branch's factor on every rank.
    pub residual: Option<f64>,
    pub swiglu_wrong_operand: bool,
    pub rope_swapped: bool,
    /// Ring attention's partial outputs summed without log-sum-exp weights (cp > 1 only).
    pub unweighted_merge: bool,
    /// Ring attention's backward against the rank's own K/V chunk (cp > 1 only).
    pub stale_kv_backward: bool,
    /// The relative size of the noise on the odd rank's partial MLP output (tp > 1 only).
    pub activation_noise: Option<f64>,
    pub router_unnormalized: bool,
    pub ep_combine_permuted: bool,
    /// Capacity decided on each rank's own tokens.
    pub capacity_local: bool,
    pub aux_loss_over_dp: bool,
    pub aux_token_count: Option<TokenCount>,
    /// The expert bias updated from one rank's counts.
    pub bias_one_rank: bool,
}

impl Layers {
    /// Layer `l`'s policy.
    pub fn at(&self, l: u32) -> Layer {
        let Some(f) = self.fault else {
            return Layer::default();
        };
        Layer {
            norm: f.norm(l),
            residual: f.residual_scale(l),
            swiglu_wrong_operand: f.swiglu_wrong_operand(l),
            rope_swapped: f.rope_swapped(l),
            unweighted_merge: f.cp_unweighted_merge(l),
            stale_kv_backward: f.cp_backward_stale_kv(l),
            activation_noise: f.activation_noise(l),
            router_unnormalized: f.router_unnormalized(l),
            ep_combine_permuted: f.ep_combine_permuted(l),
            capacity_local: f.capacity_local(l),
            aux_loss_over_dp: f.aux_loss_over_dp(l),
            aux_token_count: f.aux_token_count(l),
            bias_one_rank: f.bias_one_rank(l),
        }
    }
}

/// The loss's policy.
#[derive(Clone, Copy, Debug, Default)]
pub struct Loss {
    /// The cross-entropy computed on logits gathered over TP (tp > 1).
    pub gathers_logits_before_loss: bool,
    /// Label smoothing's uniform share divided by the rank's vocabulary block.
    pub smooths_over_local_vocab: bool,
    pub leaves_vocab_padding_unmasked: bool,
    /// The loss gradient scaled by the CP size (cp > 1).
    pub scales_loss_grad_by_cp: bool,
    /// The MTP loss divided by the CP size (cp > 1).
    pub mtp_scaled_down_by_cp: bool,
    /// Each microbatch's loss normalized by its own tokens (several microbatches).
    pub normalizes_per_microbatch: bool,
    /// The logged loss the microbatches' sum, not their mean (several microbatches).
    pub logs_microbatch_sum: bool,
}

/// Dropout's streams.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rng {
    /// The attention heads' masks drawn from the default stream, as if replicated.
    pub shared_across_tp: bool,
    /// Every CP rank draws at its local indices.
    pub shared_across_cp: bool,
    /// A replicated region drawn from a generator forked per TP rank.
    pub forked_in_replicated_region: bool,
    /// A recomputed span's re-run draws the model-parallel stream's next masks (tp > 1).
    pub recompute_not_restored: bool,
}

/// Gradients' policy: accumulation, reduction, the global norm.
#[derive(Clone, Copy, Debug, Default)]
pub struct Grads {
    fault: Option<Fault>,
    /// The data-parallel reduction leaves out the CP ranks (cp > 1).
    pub cp_reduce_skipped: bool,
    /// The tied embedding's all-reduce pairs shards at other offsets.
    pub tied_shards_mismatched: bool,
    pub expert_sync_skipped: bool,
    /// Expert gradients reduced over the dense data-parallel group.
    pub expert_dense_group: bool,
    /// Expert gradients scaled by the EP size (ep > 1).
    pub experts_scaled_by_ep: bool,
    /// TP-replicated parameters counted on every TP rank in the norm.
    pub norm_counts_tp_duplicates: bool,
    /// The norm leaves out the other EP ranks' experts (ep > 1).
    pub norm_misses_ep: bool,
    /// Each rank keeps its neighbour's reduce-scattered gradient.
    pub zero_shard_misaligned: bool,
    pub zero2_last_microbatch_only: bool,
    pub zero1_last_microbatch_unreduced: bool,
    /// Whether the mesh has pipeline stages to re-initialize ([`Grads::wipes`]).
    pipelined: bool,
}

impl Grads {
    /// The wrong factor on `rank`'s gradients of a `world`-rank mesh, if any.
    pub fn rank_scale(&self, rank: usize, world: usize) -> Option<f64> {
        self.fault?.grad_scale(rank, world)
    }

    /// The wrong factor on data-parallel replica `d`'s accumulated gradients, if any.
    pub fn replica_scale(&self, d: usize, dp: usize, microbatches: usize) -> Option<f64> {
        self.fault?.replica_scale(d, dp, microbatches)
    }

    /// What reaches the accumulator of microbatch `mb` of `count`, as a factor (0: lost).
    pub fn microbatch_scale(&self, mb: usize, count: usize) -> Option<f64> {
        self.fault?.microbatch_scale(mb, count)
    }

    /// Whether microbatch `mb` of `count`'s gradients are wiped by a stage re-initialization
    /// (pp > 1: every microbatch's but the last).
    pub fn wipes(&self, mb: usize, count: usize) -> bool {
        self.pipelined && self.fault.is_some_and(|f| f.stage_reinit_wipes(mb, count))
    }

    /// Whether the unshard of parameter `name` after the first step is a no-op.
    pub fn stale_unshard(&self, name: &str) -> bool {
        self.fault.is_some_and(|f| f.fsdp_stale_unshard(name))
    }
}

/// The optimizer's policy.
#[derive(Clone, Copy, Debug, Default)]
pub struct Optimizer {
    /// The sharded optimizer decays the exempt parameters' shards too.
    pub decays_exempt_shards: bool,
    /// Whose moments move toward their neighbour shard's, and how far.
    pub foreign_state: Option<ForeignState>,
    /// Extra schedule steps per update.
    pub schedule_extra_steps: u32,
}
