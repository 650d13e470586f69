//! Where each catalogued mutation is injected.
//!
//! A fault is a property of one run that acts at the sites where the bug would live in a real
//! training stack: collective calls (by site name), the layer code of one rank or of every
//! rank, the gradient accumulator and the gradient finalization, and checkpoint save. Keeping
//! every injection point in this module makes it easy to see that the correct path and the
//! mutated path differ only where the catalog ([`meshparity_specs::catalog`]) says; names,
//! descriptions and what a mesh needs live only there. `loss.rs` holds the loss and data
//! side's flags, `experts.rs` the router's and expert parallelism's, `rng.rs` the random
//! streams', `resume.rs` a resumption's; `tests.rs` checks every entry is injected somewhere.
//! The training path never reads a [`Fault`]: `policy.rs` resolves it once, when a run is
//! built, into [`Policies`] — plain flags, factors and hooks whose defaults are correct.

use meshparity_specs::catalog::{self, Id};

mod aux;
mod experts;
mod loss;
mod packing;
mod policy;
mod resume;
mod rng;

pub use aux::TokenCount;
pub use policy::{Layer, Policies};
pub use resume::ResumeFault;

/// How a collective call is altered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alteration {
    /// Each rank keeps its own input (the reduction never happened).
    Skip,
    /// A sum becomes a mean.
    Average,
    /// A point-to-point send goes to another stage than the receiver expects.
    Misroute,
    /// A reduction done as an all-gather whose first block is kept: rank 0's input everywhere.
    FirstBlock,
    /// An all-gather done as an all-reduce: every block position holds the sum of the blocks.
    SumBlocks,
}

impl Alteration {
    pub fn as_str(self) -> &'static str {
        match self {
            Alteration::Skip => "skipped",
            Alteration::Average => "averaged",
            Alteration::Misroute => "sent to the wrong stage",
            Alteration::FirstBlock => "all-gathered, first block kept",
            Alteration::SumBlocks => "all-reduced instead of gathered",
        }
    }
}

/// How one rank's RMSNorm is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormFault {
    /// Epsilon [`WRONG_EPS`] instead of the model's.
    Epsilon,
    /// mean(|x|) instead of mean(x²).
    Power,
}

/// How checkpoint save is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveFault {
    /// TP-sharded tensors are written by TP rank 0 only.
    DropTpShards,
    /// Replicated tensors are saved as TP shards (concatenated on load).
    DuplicateReplicated,
}

impl SaveFault {
    pub fn as_str(self) -> &'static str {
        match self {
            SaveFault::DropTpShards => "TP-sharded tensors of TP ranks > 0 not written",
            SaveFault::DuplicateReplicated => "replicated tensors saved as TP shards",
        }
    }
}

/// `zero-foreign-optimizer-state`: the fraction of the way a rank's moments move toward its
/// neighbour shard's, and whether every rank's do or only the last rank's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForeignState {
    pub fraction: f64,
    pub every_rank: bool,
}

/// One injected bug, at its catalogued size or (for detection power) at a chosen one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault(Id, Option<Epsilon>);

/// A perturbation's relative size ε for `calibrate --power`: the faults that scale a value
/// ([`Fault::SCALABLE`]) scale it by 1 ± ε instead of their catalogued factor. Held in parts
/// per 10¹² so that a fault stays `Eq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epsilon(u64);

impl Epsilon {
    const UNIT: f64 = 1e12;

    /// `None` outside (0, 10].
    pub fn new(eps: f64) -> Option<Epsilon> {
        (eps > 0.0 && eps <= 10.0).then(|| Epsilon((eps * Self::UNIT).round() as u64))
    }

    pub fn get(self) -> f64 {
        self.0 as f64 / Self::UNIT
    }
}

/// The factor the gradient-scaling faults apply: a missing `1/dp` on one rank of a dp2 group,
/// the typical form of this bug.
pub const WRONG_SCALE: f64 = 2.0;
/// The epsilon of `norm-epsilon-one-rank` (the model's is 1e-5).
pub const WRONG_EPS: f64 = 1e-2;
/// The residual-branch factor of `residual-scale-all-ranks`: the branch added twice. Measured on
/// the quickstart model at init: 1.01 moves the logits by 6e-3 (f32 catches it, bf16 cannot:
/// its gate is 7e-2), 1.1 by 1.2e-2 (bf16 still cannot), 2 by 0.40. See docs/mutations.md.
pub const RESIDUAL_SCALE: f64 = 2.0;
/// The relative size of `activation-shard-corrupted`'s noise: a corruption as large as the
/// values it hits, as the silent-data-corruption reports describe (a few bits flipped high in
/// the exponent or mantissa move a value by its own size).
pub const ACTIVATION_NOISE: f64 = 1.0;

impl Fault {
    /// Every catalogued fault, in catalog order.
    pub fn all() -> impl Iterator<Item = Fault> {
        catalog::CATALOG.iter().map(|m| Fault(m.id, None))
    }

    /// The faults whose size can be chosen (`NAME@ε`): one rank's gradients ×(1+ε), one
    /// replica's accumulated gradients ×(1−ε), the first layer's attention residual branch
    /// ×(1+ε) on every rank, noise of relative size ε on one TP rank's share of an activation,
    /// one rank's optimizer moments moved the fraction ε toward another shard's, the last
    /// microbatch's gradients lost by the fraction ε.
    pub const SCALABLE: &[Id] = &[
        Id::ScaleOneRankGrad,
        Id::WrongAccumulationCount,
        Id::ResidualScaleAllRanks,
        Id::ActivationShardCorrupted,
        Id::ForeignOptimizerState,
        Id::ReduceBeforeLastMicrobatch,
    ];

    pub fn name(self) -> &'static str {
        catalog::by_id(self.0).name
    }

    pub fn id(self) -> Id {
        self.0
    }

    /// A catalogued fault by name, or `NAME@ε` for a scalable one at size ε.
    pub fn from_name(name: &str) -> Option<Fault> {
        match name.split_once('@') {
            None => catalog::find(name).map(|m| Fault(m.id, None)),
            Some((base, eps)) => {
                let id = catalog::find(base)?.id;
                let eps = Epsilon::new(eps.parse().ok()?)?;
                Self::SCALABLE.contains(&id).then_some(Fault(id, Some(eps)))
            }
        }
    }

    /// The factor a scalable fault applies: 1 + ε (or 1 − ε with `short`) at a chosen size,
    /// `catalogued` otherwise.
    fn factor(self, catalogued: f64, short: bool) -> f64 {
        match self.1 {
            Some(e) if short => 1.0 - e.get(),
            Some(e) => 1.0 + e.get(),
            None => catalogued,
        }
    }

    /// What happens to the collective at `site` (a full site name such as
    /// `layers.0.mlp.down.fwd.all_reduce`).
    fn alter(self, site: &str) -> Option<Alteration> {
        let hit = |prefix: &str| site.starts_with(prefix);
        // Under ZeRO the data-parallel reduction of gradients is a reduce-scatter.
        let dp_reduce = site.ends_with(".dp.all_reduce") || site.ends_with(".dp.reduce_scatter");
        match self.0 {
            // One layer (the first) carries the bug, as such bugs usually sit in one module.
            Id::SkipTpForwardAllReduce if hit("layers.0.mlp.down.fwd.") => Some(Alteration::Skip),
            Id::TpAverageInsteadOfSum if hit("layers.0.attn.o.fwd.") => Some(Alteration::Average),
            Id::SkipTpInputGradAllReduce if hit("layers.0.mlp.in.bwd.") => Some(Alteration::Skip),
            Id::SkipQkvGradAllReduce if hit("layers.0.attn.in.bwd.") => Some(Alteration::Skip),
            Id::TpAllReduceAsAllGather if hit("layers.0.attn.o.fwd.") => {
                Some(Alteration::FirstBlock)
            }
            Id::SpAllGatherAsAllReduce if hit("layers.0.mlp.in.fwd.") => {
                Some(Alteration::SumBlocks)
            }
            Id::SkipDpGradAllReduce if hit("grad.") && dp_reduce => Some(Alteration::Skip),
            Id::TiedEmbeddingGradUnsynced if site == "grad.embed.weight.embedding.all_reduce" => {
                Some(Alteration::Skip)
            }
            // A per-rank mean loss: the global token count is never all-reduced; the first form
            // then averages gradients (and the logged loss) over DP, the second sums them.
            Id::LocalLossNormalization | Id::LocalLossNormalizationSum
                if hit("loss.tokens.dp.") =>
            {
                Some(Alteration::Skip)
            }
            Id::LocalLossNormalization if (hit("grad.") || hit("loss.report.")) && dp_reduce => {
                Some(Alteration::Average)
            }
            Id::SkipSpNormGradAllReduce
                if hit("grad.")
                    && site.contains("norm.weight")
                    && site.ends_with(".tp.all_reduce") =>
            {
                Some(Alteration::Skip)
            }
            // Every layer's router: its weight is replicated over TP but, under SP, sees only
            // the rank's sequence shard, so its gradient is partial on each TP rank.
            Id::RouterGradUnsyncedUnderSp
                if hit("grad.")
                    && site.contains(".mlp.router.weight")
                    && site.ends_with(".tp.all_reduce") =>
            {
                Some(Alteration::Skip)
            }
            Id::WrongSendPeer if hit("pp.stage0.fwd.send") => Some(Alteration::Misroute),
            // Each rank's own sum of squares, never reduced: the norm of its local shards.
            Id::ClipNormLocalShards if hit("grad_norm.") => Some(Alteration::Skip),
            // The receive of the first ring step never lands: the buffer keeps the rank's own
            // chunk, used as if it were the previous rank's.
            Id::CpStaleKvChunk if hit("layers.0.attn.kv.ring1.fwd.") => Some(Alteration::Skip),
            // Label smoothing's uniform share from the rank's own vocabulary block, never
            // reduced (and divided by the block's size: `smooths_over_local_vocab`).
            Id::LabelSmoothingLocalVocab if hit("loss.smooth.") => Some(Alteration::Skip),
            // Each rank's load balance from its own tokens' expert counts.
            Id::LoadBalanceLocalCounts if hit("layers.") && site.contains(".router.counts.") => {
                Some(Alteration::Skip)
            }
            _ => None,
        }
    }

    /// Whether the gradients of microbatch `mb` of `count` are lost because the gradients were
    /// finalized (reduced and handed to the optimizer) before it accumulated.
    #[cfg(test)]
    fn drops_microbatch(self, mb: usize, count: usize) -> bool {
        self.microbatch_scale(mb, count) == Some(0.0)
    }

    /// What reaches the accumulator of microbatch `mb`'s gradients, as a factor: 0 when they
    /// are lost whole (the catalogued bug), 1 − ε at a chosen size.
    fn microbatch_scale(self, mb: usize, count: usize) -> Option<f64> {
        (self.0 == Id::ReduceBeforeLastMicrobatch && count > 1 && mb + 1 == count)
            .then(|| self.1.map_or(0.0, |e| (1.0 - e.get()).max(0.0)))
    }

    /// Whether microbatch `mb`'s gradients are wiped before they reach the optimizer: the
    /// pipeline stages are re-initialized before the next microbatch (NeMo Automodel's
    /// `reset_pp_stage_shapes`), clearing every gradient accumulated so far, so only the
    /// last of `count` microbatches survives.
    fn stage_reinit_wipes(self, mb: usize, count: usize) -> bool {
        self.0 == Id::StageReinitWipesGrads && mb + 1 < count
    }

    /// The wrong factor applied to a rank's gradients, if this fault scales that rank.
    fn grad_scale(self, rank: usize, world: usize) -> Option<f64> {
        match self.0 {
            Id::ScaleOneRankGrad if rank + 1 == world => Some(self.factor(WRONG_SCALE, false)),
            Id::ScaleSeveralRanksGrad if rank > 0 => Some(WRONG_SCALE),
            _ => None,
        }
    }

    /// The wrong factor on DP replica `d`'s accumulated gradients: the last replica counts one
    /// microbatch too many.
    fn replica_scale(self, d: usize, dp: usize, microbatches: usize) -> Option<f64> {
        (self.0 == Id::WrongAccumulationCount && d + 1 == dp)
            .then(|| self.factor(microbatches as f64 / (microbatches + 1) as f64, true))
    }

    /// The wrong RMSNorm of the first layer's attention norm on the one faulty rank.
    fn norm(self, layer: u32) -> Option<NormFault> {
        match self.0 {
            Id::NormEpsilonOneRank if layer == 0 => Some(NormFault::Epsilon),
            Id::NormWrongPowerOneRank if layer == 0 => Some(NormFault::Power),
            _ => None,
        }
    }

    /// The relative size of the noise on the odd rank's partial output of `layer`'s MLP (the
    /// catalogued size: as large as the values themselves).
    fn activation_noise(self, layer: u32) -> Option<f64> {
        (self.0 == Id::ActivationShardCorrupted && layer == 0)
            .then(|| self.1.map_or(ACTIVATION_NOISE, Epsilon::get))
    }

    /// Whose optimizer moments move toward their shard-group neighbour's before each update,
    /// and how far: as catalogued, every rank's all the way (each shard updated with the next
    /// one's state: an offset off by one shard); at a chosen size ε, one rank's by the
    /// fraction ε (`calibrate --power`: one perturbed shard).
    fn foreign_optimizer_state(self) -> Option<ForeignState> {
        (self.0 == Id::ForeignOptimizerState).then(|| match self.1 {
            None => ForeignState {
                fraction: 1.0,
                every_rank: true,
            },
            Some(e) => ForeignState {
                fraction: e.get().min(1.0),
                every_rank: false,
            },
        })
    }

    /// The wrong residual-branch factor of `layer`'s attention, on every rank.
    fn residual_scale(self, layer: u32) -> Option<f64> {
        (self.0 == Id::ResidualScaleAllRanks && layer == 0)
            .then(|| self.factor(RESIDUAL_SCALE, false))
    }

    /// Whether `layer`'s SwiGLU backward uses the wrong operand.
    fn swiglu_wrong_operand(self, layer: u32) -> bool {
        self.0 == Id::SwigluBackwardWrongOperand && layer == 0
    }

    /// Whether `layer`'s ring attention sums its partial outputs without log-sum-exp weights.
    fn cp_unweighted_merge(self, layer: u32) -> bool {
        self.0 == Id::CpUnweightedMerge && layer == 0
    }

    /// Whether `layer`'s ring attention backward computes each step's gradients against the
    /// rank's own K/V chunk (a no-op without CP: there is one step, the rank's own).
    fn cp_backward_stale_kv(self, layer: u32) -> bool {
        self.0 == Id::CpBackwardStaleKv && layer == 0
    }

    /// Whether the data-parallel gradient reduction leaves out the context-parallel ranks
    /// (reduces over dp only, not over Megatron's dp × cp group).
    fn cp_grad_reduce_skipped(self) -> bool {
        self.0 == Id::CpSkipGradReduce
    }

    /// Whether parameters replicated over TP enter the gradient norm on every TP rank.
    fn norm_counts_tp_duplicates(self) -> bool {
        self.0 == Id::ClipNormTpDuplicates
    }

    /// Whether `layer`'s RoPE backward swaps its outputs.
    fn rope_swapped(self, layer: u32) -> bool {
        self.0 == Id::RopeBackwardSwapped && layer == 0
    }

    /// Whether each rank of a shard group keeps its neighbour's reduce-scattered gradient.
    fn zero_shard_misaligned(self) -> bool {
        self.0 == Id::ZeroShardMisaligned
    }

    /// Whether the sharded optimizer decays every parameter's flat shard, the exempt ones
    /// (norms) included.
    fn decays_exempt_shards(self) -> bool {
        self.0 == Id::ShardDecayExemptionsLost
    }

    /// Whether a pipeline rank runs its model chunks in reverse order (interleaved schedule).
    fn chunks_reversed(self) -> bool {
        self.0 == Id::InterleavedChunksReversed
    }

    /// Whether ZeRO-2's sharded accumulator keeps only the last microbatch's gradient.
    fn zero2_last_microbatch_only(self) -> bool {
        self.0 == Id::Zero2LastMicrobatchOnly
    }

    /// Whether ZeRO-1 reduce-scatters before the last microbatch, then adds it unreduced.
    fn zero1_last_microbatch_unreduced(self) -> bool {
        self.0 == Id::Zero1LastMicrobatchUnreduced
    }

    /// Whether the unshard of parameter `name` after the first step is a no-op (the first
    /// layer: one FSDP unit carries the bug).
    fn fsdp_stale_unshard(self, name: &str) -> bool {
        self.0 == Id::FsdpStaleUnshard && name.starts_with("layers.0.")
    }

    /// Whether the embedding all-reduce pairs a first-stage shard with a last-stage shard at
    /// another offset (the next data-parallel rank's).
    fn tied_shards_mismatched(self) -> bool {
        self.0 == Id::TiedEmbeddingShardsMismatched
    }

    /// Extra learning-rate schedule steps per update: one per microbatch but the first, when
    /// the scheduler is stepped per microbatch.
    fn schedule_extra_steps(self, microbatches: usize) -> u32 {
        match self.0 {
            Id::LrSchedulerPerMicrobatch => microbatches.saturating_sub(1) as u32,
            _ => 0,
        }
    }

    pub fn save(self) -> Option<SaveFault> {
        match self.0 {
            Id::SaveDropsTpShards => Some(SaveFault::DropTpShards),
            Id::SaveDuplicatesReplicated => Some(SaveFault::DuplicateReplicated),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
