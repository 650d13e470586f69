//! The mutation catalog: every parallelization bug meshparity knows how to inject, in one
//! registry. Specs select from it, the planner pairs each entry with the meshes it applies to,
//! the burn engine injects it by [`Id`], `meshparity mutations` and docs/mutations.md list it,
//! and localization tests check that each one is found where [`Mutation::site`] says.
//!
//! Sources: VERDICT (SOSP'25) reproduces 14 classes of real parallelization bugs; ART's oracle
//! harness keeps sensitivity mutations its checks must fail on. [`Mutation::classes`] maps each
//! entry to theirs; [`NOT_APPLICABLE`] lists the classes no entry covers, and why.

/// A property a mesh must have for a mutation to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    Dp,
    Tp,
    Sp,
    Pp,
    Microbatches,
    MultiRank,
    /// Three or more ranks: "several ranks but not all" needs them.
    ThreeRanks,
    Ep,
    Cp,
    /// A model with routed experts (the `moe` family).
    Experts,
    /// A model whose MLP is one tensor-parallel SwiGLU (the `llama` family).
    DenseMlp,
    /// Sequences split over ranks: SP (with TP) or CP.
    SplitSequences,
    /// More than one replica of each expert shard (expert-data-parallel size > 1).
    Edp,
    /// Expert-data-parallel groups that are not the dense data-parallel groups (ep·etp ≠ tp).
    ExpertGroups,
    /// More than one rank per pipeline stage (replicas of a stage's replicated state).
    StageRanks,
    /// A moe model with a capacity factor (tokens may be dropped).
    Capacity,
    /// A moe model with the score-correction bias.
    ExpertBias,
    /// A moe model whose load-balance loss is normalized per token
    /// (`aux_loss_normalization = "token"`).
    TokenAux,
    /// Parameters split over ranks (tp, pp, ep or etp > 1): a rank's own gradients are not
    /// the whole model's.
    ModelParallel,
    /// TP ranks holding whole copies of the experts (tp > 1, experts not split: ep·etp = 1).
    TpReplicatedExperts,
    /// Sharded data parallelism with more than one rank per shard group (zero ≥ 1).
    Sharded,
    /// A rank's own gradients are not the whole model's: parameters split over ranks, or
    /// gradients sharded over the data-parallel group (a norm of the local gradients differs).
    SplitGradients,
    /// ZeRO stage 1 (sharded optimizer state; gradients reduce-scattered once per step).
    Zero1,
    /// ZeRO stage 2 (gradients reduce-scattered per microbatch).
    Zero2,
    /// ZeRO stage 3 (FSDP: parameters sharded, unsharded before each step).
    Zero3,
    /// A model whose embedding is its output head (`tie_embeddings = true`).
    TiedEmbeddings,
    /// A model with a multi-token prediction layer (`mtp_layers = 1`).
    Mtp,
    /// A learning rate that changes over the run (`warmup_steps` or `lr_decay`).
    LrSchedule,
    /// The AdamW optimizer (state to corrupt: its moments).
    Adamw,
    /// Weight decay set in `[run]` (`weight_decay`), with norms and biases exempt.
    WeightDecay,
    /// The interleaved pipeline schedule: several model chunks per pipeline rank.
    Interleaved,
    /// Label smoothing set in `[run]` (`label_smoothing`).
    LabelSmoothing,
    /// A vocabulary not divisible by tp, padded to a multiple of it.
    PaddedVocab,
    /// Tensor parallelism without sequence parallelism: the residual stream is replicated over
    /// each TP group.
    TpWithoutSp,
    /// Dropout on the attention probabilities (`attention_dropout`).
    AttentionDropout,
    /// Dropout on the residual branches (`hidden_dropout`).
    HiddenDropout,
    /// Activation recompute (`recompute`).
    Recompute,
    /// Several documents packed per row (`packed_sequences`).
    PackedSequences,
    /// Packed documents padded for context parallelism's per-document chunks
    /// (`pad_documents_to`, TransformerEngine's THD layout).
    PaddedDocuments,
    /// Dropout of either kind (`attention_dropout` or `hidden_dropout`).
    Dropout,
    /// A `[[resume]]` pair's mesh: the run saves a checkpoint and resumes from it. Bugs of the
    /// resumption apply only there, and every other bug only elsewhere (the plain meshes check
    /// it already).
    Resume,
    /// A `[[resume]]` pair whose `from` mesh splits tensors over tp (its saved shards do).
    ResumeFromTp,
}

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
    StageReinitWipesGrads,
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
    CpBackwardStaleKv,
    CpSkipGradReduce,
    RouterNotRenormalized,
    LoadBalanceLocalCounts,
    EpCombineWrongPermutation,
    ExpertGradDenseGroup,
    ExpertGradSyncSkipped,
    ExpertGradScaledByEp,
    RouterGradUnsyncedUnderSp,
    CapacityLocalTokens,
    ExpertBiasOneRank,
    ClipNormLocalShards,
    ClipNormTpDuplicates,
    ClipNormMissingEp,
    ZeroShardMisaligned,
    Zero2LastMicrobatchOnly,
    Zero1LastMicrobatchUnreduced,
    FsdpStaleUnshard,
    TiedEmbeddingGradUnsynced,
    TiedEmbeddingShardsMismatched,
    LrSchedulerPerMicrobatch,
    ActivationShardCorrupted,
    ForeignOptimizerState,
    ShardDecayExemptionsLost,
    InterleavedChunksReversed,
    LabelSmoothingLocalVocab,
    VocabPaddingUnmasked,
    CeOnGatheredLogits,
    CpLabelsRolledPerShard,
    MtpRolledPerCpShard,
    MtpLossScaledDownByCp,
    CpLossGradScaledByCp,
    InitSeededPerDpRank,
    DropoutSharedAcrossTp,
    DropoutForkedInReplicatedRegion,
    DropoutSharedAcrossCp,
    RecomputeRngNotRestored,
    CpRingCrossesDocuments,
    CpPackedPositionsFromChunks,
    CpThdSplitByRows,
    CpThdUnpaddedBoundaries,
    MicrobatchLocalLossNormalization,
    AuxLossScaledByDp,
    AuxTokenShareOverSequence,
    AuxTokenCountOverwritten,
    ResumeMomentsDropped,
    ResumeStepReset,
    ResumeDataPositionReset,
    ResumeRngStreamReset,
    ResumeExpertBiasNotSaved,
    ResumeExpertsByLocalIndex,
    ResumeTpShardWrongAxis,
    ResumeFc1SplitUnchunked,
    LossReportMicrobatchSum,
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
    /// The optimizer's update from the finished gradients, and the state it keeps.
    Optimizer,
    /// What the run reports about itself (the logged loss): the training is untouched.
    Report,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Gradients => "gradients",
            Phase::Checkpoint => "checkpoint",
            Phase::Optimizer => "optimizer",
            Phase::Report => "report",
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
    /// any run of characters: `grad.*.dp`). For checkpoint bugs, the artifact that shows it;
    /// `|` between alternatives (`checkpoint|inputs`: the round trip's state, or the rows the
    /// ranks trained on where the continuation alone shows it).
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

mod entries;

pub use entries::CATALOG;

/// Published classes that no entry reproduces.
pub const NOT_APPLICABLE: &[NotApplicable] = &[
    NotApplicable {
        class: "ART: LoRA-specific mutations (adapter factors, adapter merge)",
        why: "the burn engine trains full weights, no adapters; the replicated-factor class is covered by sp-skip-norm-grad-all-reduce",
    },
];

impl Mutation {
    /// Whether the bug exists in a run of `model` on `mesh` trained as `training`.
    pub fn applies_to(
        &self,
        model: &crate::ModelConfig,
        mesh: &crate::mesh::MeshConfig,
        training: &crate::Training,
    ) -> bool {
        let experts = model.family.has_experts();
        if training.resume.is_some() != self.needs.contains(&Needs::Resume) {
            return false;
        }
        self.needs.iter().all(|n| match n {
            Needs::Experts => experts,
            Needs::DenseMlp => !experts,
            Needs::Capacity => experts && model.moe.capacity().is_some(),
            Needs::ExpertBias => experts && model.moe.expert_bias(),
            Needs::TokenAux => {
                experts && model.moe.aux_normalization() == crate::AuxNormalization::Token
            }
            Needs::TiedEmbeddings => model.tied(),
            Needs::Mtp => model.mtp(),
            Needs::LrSchedule => training.schedule.is_some(),
            Needs::Adamw => training.optimizer == crate::Optimizer::Adamw,
            Needs::WeightDecay => training.weight_decay.is_some_and(|w| w > 0.0),
            Needs::LabelSmoothing => training.label_smoothing.is_some_and(|e| e > 0.0),
            Needs::PaddedVocab => !model.vocab.is_multiple_of(mesh.tp),
            Needs::AttentionDropout => training.dropout.is_some_and(|d| d.attention > 0.0),
            Needs::HiddenDropout => training.dropout.is_some_and(|d| d.hidden > 0.0),
            Needs::Recompute => training.recompute.is_some(),
            Needs::ResumeFromTp => training.resume.as_ref().is_some_and(|r| r.config.tp > 1),
            Needs::PackedSequences => training.packing.is_some_and(|p| p.documents),
            Needs::PaddedDocuments => training
                .packing
                .is_some_and(|p| p.documents && p.pad_to.is_some_and(|m| m > 1)),
            Needs::Dropout => training
                .dropout
                .is_some_and(|d| d.attention > 0.0 || d.hidden > 0.0),
            n => n.holds(mesh),
        })
    }

    /// Whether a localized site is this mutation's (its [`Mutation::site`] pattern, `*` for any
    /// run of characters, `|` between alternatives: a bug that shows at the checkpoint where
    /// the round trip compares it and in the inputs where only the continuation does).
    pub fn site_matches(&self, site: &str) -> bool {
        self.site.split('|').any(|p| glob(p, site))
    }
}

/// Whether `s` matches `pattern`, where `*` stands for any run of characters (dots too).
pub fn glob(pattern: &str, s: &str) -> bool {
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
            // A table cell's `|` must be escaped, code span or not.
            m.site.replace('|', "\\|"),
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
