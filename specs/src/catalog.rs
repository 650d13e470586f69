//! The mutation catalog: every parallelization bug meshparity knows how to inject, in one
//! registry. Specs select from it, the planner pairs each entry with the meshes it applies to,
//! the burn engine injects it by [`Id`], `meshparity mutations` and docs/mutations.md list it,
//! and localization tests check that each one is found where [`Mutation::site`] says.
//!
//! Sources: VERDICT (SOSP'25) reproduces 14 classes of real parallelization bugs; ART's oracle
//! harness keeps sensitivity mutations its checks must fail on. [`Mutation::classes`] maps each
//! entry to theirs; [`NOT_APPLICABLE`] lists the classes no entry covers, and why.

use crate::mutation::Needs;

/// Which bug, for the engine that injects it. Names live only in [`CATALOG`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Id {
    SkipTpForwardAllReduce,
    TpAverageInsteadOfSum,
    SkipTpInputGradAllReduce,
    SkipQkvGradAllReduce,
    TpAllReduceAsAllGather,
    SpAllGatherAsAllReduce,
    SkipDpGradAllReduce,
    LocalLossNormalization,
    LocalLossNormalizationSum,
    WrongAccumulationCount,
    SkipSpNormGradAllReduce,
    ReduceBeforeLastMicrobatch,
    WrongSendPeer,
    ScaleOneRankGrad,
    ScaleSeveralRanksGrad,
    NormEpsilonOneRank,
    NormWrongPowerOneRank,
    ResidualScaleAllRanks,
    SwigluBackwardWrongOperand,
    RopeBackwardSwapped,
    SaveDropsTpShards,
    SaveDuplicatesReplicated,
    CpUnweightedMerge,
    CpStaleKvChunk,
    CpSkipGradReduce,
    RouterNotRenormalized,
    LoadBalanceLocalCounts,
    EpCombineWrongPermutation,
    ExpertGradDenseGroup,
    ExpertGradSyncSkipped,
    CapacityLocalTokens,
    ExpertBiasOneRank,
    ClipNormLocalShards,
    ClipNormTpDuplicates,
    ClipNormMissingEp,
}

/// Where in a step the bug acts (and where localization must find it first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Forward,
    Backward,
    /// Gradient finalization: accumulation, scaling and the reductions before the optimizer.
    Gradients,
    /// Checkpoint save and load (the roundtrip level).
    Checkpoint,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Gradients => "gradients",
            Phase::Checkpoint => "checkpoint",
        }
    }
}

/// One catalogued bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mutation {
    pub id: Id,
    pub name: &'static str,
    /// What goes wrong, in the words of a bug report.
    pub description: &'static str,
    pub needs: &'static [Needs],
    pub phase: Phase,
    /// The trace site where the burn engine injects it, as localization reports it (`*` matches
    /// any run of characters: `grad.*.dp`). For checkpoint bugs, the artifact that shows it.
    pub site: &'static str,
    /// The VERDICT / ART classes this entry reproduces.
    pub classes: &'static [&'static str],
}

/// A published bug class no entry reproduces, and why.
pub struct NotApplicable {
    pub class: &'static str,
    pub why: &'static str,
}

const fn m(
    id: Id,
    name: &'static str,
    description: &'static str,
    needs: &'static [Needs],
    phase: Phase,
    site: &'static str,
    classes: &'static [&'static str],
) -> Mutation {
    Mutation {
        id,
        name,
        description,
        needs,
        phase,
        site,
        classes,
    }
}

use Id::*;
use Needs::*;
use Phase::{Backward, Checkpoint, Forward, Gradients};

/// Every mutation meshparity knows how to inject.
#[rustfmt::skip]
pub const CATALOG: &[Mutation] = &[
    m(SkipTpForwardAllReduce, "tp-skip-forward-all-reduce",
        "a row-parallel layer skips the TP all-reduce of its partial outputs in the forward pass",
        &[Tp, DenseMlp], Forward, "layers.0.mlp.down.fwd.out",
        &["VERDICT: missing all-reduce (dataflow intact)", "ART: skip TP reduce in a row-parallel forward"]),
    m(TpAverageInsteadOfSum, "tp-average-instead-of-sum",
        "a TP reduction averages partial results instead of summing them",
        &[Tp], Forward, "layers.0.attn.o.fwd.out",
        &["ART: average instead of sum"]),
    m(SkipTpInputGradAllReduce, "tp-skip-input-grad-all-reduce",
        "the backward of a column-parallel layer's input (Megatron's `f`) skips the TP all-reduce: each rank keeps only its own shard's share of the input gradient",
        &[Tp, DenseMlp], Backward, "layers.0.mlp.in.bwd.out",
        &["VERDICT: missing all-reduce with broken dataflow"]),
    m(SkipQkvGradAllReduce, "tp-skip-qkv-grad-all-reduce",
        "the fused q/k/v projection's backward misses the reduce of its input gradient across TP",
        &[Tp], Backward, "layers.0.attn.in.bwd.out",
        &["VERDICT: missing reduce in a fused backward op"]),
    m(TpAllReduceAsAllGather, "tp-all-reduce-as-all-gather",
        "a row-parallel reduction is an all-gather whose first block is kept: every rank gets rank 0's partial sum",
        &[Tp], Forward, "layers.0.attn.o.fwd.out",
        &["VERDICT: all-reduce replaced by all-gather"]),
    m(SpAllGatherAsAllReduce, "sp-all-gather-as-all-reduce",
        "a sequence-parallel all-gather is an all-reduce: every sequence block holds the sum of the blocks instead of its own",
        &[Sp, DenseMlp], Forward, "layers.0.mlp.in.fwd.out",
        &["VERDICT: all-gather replaced by all-reduce"]),
    m(SkipDpGradAllReduce, "dp-skip-grad-all-reduce",
        "gradients are not all-reduced across the data-parallel group",
        &[Dp], Gradients, "grad.*.dp",
        &["VERDICT: missing all-reduce (dataflow intact)", "ART: skip gradient finalize"]),
    m(LocalLossNormalization, "dp-local-loss-normalization",
        "each DP rank normalizes the loss by its local token count instead of the global one, and gradients are averaged over DP",
        &[Dp], Forward, "loss.tokens.dp",
        &["ART: local instead of global loss normalization under DP"]),
    m(LocalLossNormalizationSum, "dp-local-loss-normalization-sum",
        "each DP rank normalizes the loss by its local token count, and gradients are summed over DP as the global normalization would need",
        &[Dp], Forward, "loss.tokens.dp",
        &["ART: local instead of global loss normalization under DP (second form)"]),
    m(WrongAccumulationCount, "dp-wrong-accumulation-count",
        "one data-parallel replica counts one microbatch too many and scales its accumulated gradients by m/(m+1)",
        &[Dp], Gradients, "grad.*.accumulated",
        &["VERDICT: inconsistent scaling on several ranks"]),
    m(SkipSpNormGradAllReduce, "sp-skip-norm-grad-all-reduce",
        "norm-weight gradients of sequence-parallel regions are not all-reduced across TP",
        &[Sp], Gradients, "grad.*norm.weight.dp",
        &["VERDICT: missing all-reduce (dataflow intact)", "ART: skip backward sync of a replicated factor"]),
    m(ReduceBeforeLastMicrobatch, "grad-reduce-before-last-microbatch",
        "gradients are reduced/finalized before the last microbatch has accumulated",
        &[Microbatches], Gradients, "grad.*.accumulated",
        &["VERDICT: gradient reduction before the last microbatch finished"]),
    m(WrongSendPeer, "pp-wrong-send-peer",
        "a pipeline stage sends its activation to the wrong stage",
        &[Pp], Forward, "pp.stage0.fwd.send",
        &["VERDICT: wrong pipeline send/recv peer"]),
    m(ScaleOneRankGrad, "scale-one-rank-grad",
        "one rank's gradient is scaled by a wrong factor",
        &[MultiRank], Gradients, "grad.*.accumulated",
        &["VERDICT: inconsistent scaling on one rank"]),
    m(ScaleSeveralRanksGrad, "scale-several-ranks-grad",
        "every rank but rank 0 scales its gradient by a wrong factor",
        &[ThreeRanks], Gradients, "grad.*.accumulated",
        &["VERDICT: inconsistent scaling on several ranks"]),
    m(NormEpsilonOneRank, "norm-epsilon-one-rank",
        "one rank's RMSNorm uses a different epsilon (1e-2) than the model's",
        &[MultiRank], Forward, "layers.0.attn.in.fwd.in",
        &["VERDICT: single-rank altered forward constant"]),
    m(NormWrongPowerOneRank, "norm-wrong-power-one-rank",
        "one rank's RMSNorm averages |x| instead of x² (the wrong power)",
        &[MultiRank], Forward, "layers.0.attn.in.fwd.in",
        &["VERDICT: single-rank wrong power"]),
    m(ResidualScaleAllRanks, "residual-scale-all-ranks",
        "the parallel code path adds the attention residual branch twice (scaled by 2) on every rank",
        &[MultiRank], Forward, "layers.0.mlp.*.fwd.in",
        &["VERDICT: multi-rank altered forward constant"]),
    m(SwigluBackwardWrongOperand, "swiglu-backward-wrong-operand",
        "the backward of silu(gate)·up multiplies the gate branch's gradient by silu(gate), the wrong one of the product's two inputs",
        &[MultiRank], Backward, "layers.0.mlp.*.bwd.in",
        &["VERDICT: backward consumes the wrong input of a tensor used twice"]),
    m(RopeBackwardSwapped, "rope-backward-swapped",
        "RoPE's backward returns its two half-gradients swapped",
        &[MultiRank], Backward, "layers.0.attn.in.bwd.in",
        &["VERDICT: swapped backward outputs"]),
    m(SaveDropsTpShards, "save-drops-tp-shards",
        "checkpoint save writes only TP rank 0's shards of TP-sharded tensors",
        &[Tp], Checkpoint, "checkpoint",
        &["ART: drop non-zero TP shards on save"]),
    m(SaveDuplicatesReplicated, "save-duplicates-replicated",
        "checkpoint save treats replicated tensors as TP shards, so loading concatenates every rank's copy",
        &[Tp], Checkpoint, "checkpoint",
        &["ART: duplicate replicated entries on save"]),
    m(CpUnweightedMerge, "cp-no-lse-renormalization",
        "ring attention adds the partial outputs of its ring steps as they are, without weighting each by exp(lse_step − lse) (the log-sum-exp renormalization that makes them one softmax)",
        &[Cp], Forward, "layers.0.attn.o.fwd.in",
        &["ART: CP attention without log-sum-exp renormalization"]),
    m(CpStaleKvChunk, "cp-stale-kv-chunk",
        "the first ring step's K/V receive never lands: each rank attends to its own chunk again, masked as the previous rank's (the KV chunk of the wrong ring step)",
        &[Cp], Forward, "layers.0.attn.o.fwd.in",
        &["CP: KV chunk of the wrong ring step"]),
    m(CpSkipGradReduce, "cp-skip-grad-reduce",
        "gradients are all-reduced over the data-parallel ranks only, not over the context-parallel ranks that hold the other chunks of each sequence",
        &[Cp], Gradients, "grad.*.dp",
        &["CP: gradient reduce over the cp group skipped"]),
    m(RouterNotRenormalized, "moe-router-not-renormalized",
        "the parallel path weights each token's top-k experts by their raw router scores instead of the scores renormalized to sum to one (a dropped norm_topk_prob), on every rank",
        &[Experts, MultiRank], Forward, "layers.0.mlp.combine.fwd.in",
        &["MoE: router probabilities not renormalized after top-k"]),
    m(LoadBalanceLocalCounts, "moe-load-balance-local-counts",
        "the load-balance loss uses each rank's own tokens' expert counts instead of each sequence's counts over all the ranks holding its parts (SP, CP)",
        &[Experts, SplitSequences], Forward, "layers.0.mlp.router.counts",
        &["MoE: load-balance loss from local instead of global token counts"]),
    m(EpCombineWrongPermutation, "ep-a2a-combine-wrong-permutation",
        "the combine all-to-all puts the experts' outputs back one row off: each (token, expert) row gets its neighbour's output (a wrong unpermute index), consistently in backward",
        &[Experts, Ep], Forward, "layers.0.mlp.combine.fwd.in",
        &["VERDICT/ART: all-to-all combine with a wrong permutation"]),
    m(ExpertGradDenseGroup, "ep-expert-grad-dense-group",
        "expert gradients are all-reduced over the dense data-parallel group (dp × cp ranks of one tp index) instead of the expert-data-parallel group: ranks holding different experts add each other's gradients",
        &[Experts, Ep, ExpertGroups], Gradients, "grad.*.dp",
        &["ART: expert gradients synced on the wrong group (dp instead of edp)"]),
    m(ExpertGradSyncSkipped, "ep-expert-grad-sync-skipped",
        "expert gradients are never all-reduced over the expert-data-parallel group: each replica of an expert steps with its own tokens' gradient only",
        &[Experts, Ep, Edp], Gradients, "grad.*.dp",
        &["ART: expert gradient sync skipped"]),
    m(CapacityLocalTokens, "moe-capacity-local-tokens",
        "expert capacity is decided on each rank's own tokens (Megatron's per-rank capacity) instead of each whole sequence's: where SP or CP split a sequence, other routed slots are dropped than on one device",
        &[Experts, Capacity, SplitSequences], Forward, "layers.0.mlp.combine.fwd.in",
        &["MoE: token dropping that depends on the layout (capacity from local token counts)"]),
    m(ExpertBiasOneRank, "moe-expert-bias-one-rank",
        "the score-correction bias is moved on the first rank of each stage only (an update outside the optimizer guarded by a rank check): the other replicas keep the old bias and drift apart",
        &[Experts, ExpertBias, StageRanks], Gradients, "layers.0.mlp.router.expert_bias",
        &["MoE: state updated outside the optimizer (the auxiliary-loss-free bias) on one replica only"]),
    m(ClipNormLocalShards, "clip-norm-local-shards",
        "the gradient norm (reported, and clipped by) is each rank's own shards' norm: the sum of squares is never all-reduced over the model-parallel ranks, so ranks clip by different norms",
        &[ModelParallel], Gradients, "grad_norm",
        &["sgl-project/SpecForge PR#663: FSDP clip_grad_norm_ over each rank's local shards"]),
    m(ClipNormTpDuplicates, "clip-norm-tp-duplicates",
        "parameters replicated over TP (norm weights) enter the gradient norm once per TP rank instead of once: the norm is inflated and clipping too strong",
        &[Experts, TpReplicatedExperts], Gradients, "grad_norm",
        &["NVIDIA-NeMo/RL PR#3788: TP-replicated gradients counted tp_size times in get_grad_norm", "ROCm/TransformerEngine PR#715: replicated weights marked tensor-parallel, grad norm inflated 1.36-1.52x"]),
    m(ClipNormMissingEp, "clip-norm-missing-ep",
        "the expert parameters' share of the gradient norm is reduced over the expert-TP and pipeline ranks but not the expert-parallel axis: each rank counts only its own experts",
        &[Experts, Ep], Gradients, "grad_norm",
        &["NVIDIA-NeMo/Automodel PR#3817: gradient-norm reduction missing the expert-parallel axis"]),
];

/// Published classes that no entry reproduces.
pub const NOT_APPLICABLE: &[NotApplicable] = &[
    NotApplicable {
        class: "ART: LoRA-specific mutations (adapter factors, adapter merge)",
        why: "the burn engine trains full weights, no adapters; the replicated-factor class is covered by sp-skip-norm-grad-all-reduce",
    },
];

impl Mutation {
    /// Whether `model` on `mesh` has what this bug needs.
    pub fn applies_to(&self, model: &crate::ModelConfig, mesh: &crate::mesh::MeshConfig) -> bool {
        let experts = model.family.has_experts();
        self.needs.iter().all(|n| match n {
            Needs::Experts => experts,
            Needs::DenseMlp => !experts,
            Needs::Capacity => experts && model.moe.capacity().is_some(),
            Needs::ExpertBias => experts && model.moe.expert_bias(),
            n => n.holds(mesh),
        })
    }

    /// Whether a localized site is this mutation's (its [`Mutation::site`] pattern, `*` for any
    /// run of characters).
    pub fn site_matches(&self, site: &str) -> bool {
        glob(self.site, site)
    }
}

fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, rest)) => {
            let Some(tail) = s.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len()).any(|i| tail.is_char_boundary(i) && glob(rest, &tail[i..]))
        }
    }
}

pub fn find(name: &str) -> Option<&'static Mutation> {
    CATALOG.iter().find(|m| m.name == name)
}

pub fn by_id(id: Id) -> &'static Mutation {
    CATALOG
        .iter()
        .find(|m| m.id == id)
        .expect("every Id has a catalog entry (tested)")
}

pub fn names() -> Vec<&'static str> {
    CATALOG.iter().map(|m| m.name).collect()
}

/// The catalog as a Markdown table (docs/mutations.md holds it; `meshparity list mutations
/// --markdown` prints it).
pub fn markdown() -> String {
    let mut s = String::from(
        "| mutation | needs | phase | injected at | what goes wrong | reproduces |\n|---|---|---|---|---|---|\n",
    );
    for m in CATALOG {
        let needs: Vec<&str> = m.needs.iter().map(|n| n.describe()).collect();
        s += &format!(
            "| `{}` | {} | {} | `{}` | {} | {} |\n",
            m.name,
            needs.join(", "),
            m.phase.as_str(),
            m.site,
            m.description,
            m.classes.join("; ")
        );
    }
    s += "\n| class not reproduced | why |\n|---|---|\n";
    for n in NOT_APPLICABLE {
        s += &format!("| {} | {} |\n", n.class, n.why);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids_are_unique() {
        for (i, a) in CATALOG.iter().enumerate() {
            for b in &CATALOG[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.id, b.id);
            }
        }
    }

    #[test]
    fn globs() {
        assert!(glob("grad.*.dp", "grad.layers.0.mlp.up.weight.dp"));
        assert!(glob(
            "grad.*norm.weight.dp",
            "grad.layers.1.attn_norm.weight.dp"
        ));
        assert!(!glob("grad.*.dp", "grad.x.tp"));
        assert!(glob("loss.tokens.dp", "loss.tokens.dp"));
    }

    #[test]
    fn every_verdict_class_is_covered() {
        let covered: Vec<&str> = CATALOG
            .iter()
            .flat_map(|m| m.classes.iter().copied())
            .collect();
        let verdict = covered
            .iter()
            .filter(|c| c.starts_with("VERDICT"))
            .collect::<Vec<_>>();
        for class in [
            "missing all-reduce (dataflow intact)",
            "missing all-reduce with broken dataflow",
            "all-reduce replaced by all-gather",
            "all-gather replaced by all-reduce",
            "missing reduce in a fused backward op",
            "wrong pipeline send/recv peer",
            "single-rank altered forward constant",
            "multi-rank altered forward constant",
            "single-rank wrong power",
            "backward consumes the wrong input of a tensor used twice",
            "swapped backward outputs",
            "inconsistent scaling on one rank",
            "inconsistent scaling on several ranks",
            "gradient reduction before the last microbatch finished",
        ] {
            assert!(
                verdict.iter().any(|c| c.ends_with(class)),
                "VERDICT class `{class}` has no mutation"
            );
        }
    }
}
