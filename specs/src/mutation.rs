//! `[mutations]`: which catalogued bugs ([`crate::catalog`]) a spec injects, and what a mesh
//! needs for each to apply.
//!
//! A mutation job injects one bug into a correct mesh and passes only if some check fails. Each
//! mutation names what a mesh needs for the bug to exist at all (no DP all-reduce to skip on a
//! dp1 mesh), and the planner only pairs it with meshes that have it.

use crate::decode::{Ctx, Table};
use crate::diagnostic::Diagnostic;
use crate::mesh::MeshConfig;
use crate::source::{Loc, Located};
use crate::suggest;

pub const KEYS: &[&str] = &["select", "exclude"];

impl Needs {
    pub fn holds(self, m: &MeshConfig) -> bool {
        match self {
            Needs::Dp => m.dp > 1,
            Needs::Tp => m.tp > 1,
            Needs::Sp => m.sp && m.tp > 1,
            Needs::Pp => m.pp > 1,
            Needs::Microbatches => m.microbatches > 1,
            Needs::MultiRank => m.world_size() > 1,
            Needs::ThreeRanks => m.world_size() > 2,
            Needs::Ep => m.ep > 1,
            Needs::Cp => m.cp > 1,
            // A property of the model, not the mesh: see `Mutation::applies_to`.
            Needs::Experts | Needs::DenseMlp => true,
            Needs::SplitSequences => (m.sp && m.tp > 1) || m.cp > 1,
            Needs::Edp => {
                let expert = u64::from(m.ep) * u64::from(m.etp);
                expert > 1 && m.world_size() / u64::from(m.pp) > expert
            }
            // On a stage's ranks, the dense dp groups are the residues mod tp, the edp groups
            // those mod ep·etp: the same partition exactly when the moduli are equal.
            Needs::ExpertGroups => m.ep * m.etp > 1 && m.ep * m.etp != m.tp,
            Needs::StageRanks => m.world_size() / u64::from(m.pp.max(1)) > 1,
            // Properties of the model: see `Mutation::applies_to`.
            Needs::Capacity | Needs::ExpertBias | Needs::TokenAux => true,
            Needs::ModelParallel => [m.tp, m.pp, m.ep, m.etp].iter().any(|&n| n > 1),
            Needs::TpReplicatedExperts => m.tp > 1 && m.ep * m.etp == 1,
            Needs::Sharded => m.zero > 0 && m.shard_dp() * m.cp > 1,
            Needs::SplitGradients => Needs::ModelParallel.holds(m) || Needs::Sharded.holds(m),
            Needs::Zero1 => m.zero == 1,
            Needs::Zero2 => m.zero == 2,
            Needs::Zero3 => m.zero == 3,
            Needs::Interleaved => m.pp > 1 && m.chunks() > 1,
            Needs::TpWithoutSp => m.tp > 1 && !m.sp,
            // A property of the model: see `Mutation::applies_to`.
            Needs::TiedEmbeddings
            | Needs::Mtp
            | Needs::LrSchedule
            | Needs::Adamw
            | Needs::WeightDecay
            | Needs::LabelSmoothing
            | Needs::PaddedVocab
            | Needs::AttentionDropout
            | Needs::HiddenDropout
            | Needs::Recompute
            | Needs::PackedSequences
            | Needs::PaddedDocuments
            | Needs::Dropout
            | Needs::Resume
            | Needs::ResumeFromTp => true,
        }
    }

    /// Names a spec writes in an engine mutation's `needs`.
    pub const NAMES: &'static [&'static str] = &[
        "dp",
        "tp",
        "sp",
        "pp",
        "microbatches",
        "multi-rank",
        "three-ranks",
        "ep",
        "cp",
        "experts",
        "dense-mlp",
        "split-sequences",
        "edp",
        "expert-groups",
        "stage-ranks",
        "capacity",
        "expert-bias",
        "model-parallel",
        "tp-replicated-experts",
        "sharded",
        "split-gradients",
        "interleaved",
        "tp-without-sp",
        "resume",
        "adamw",
    ];

    pub fn parse(name: &str) -> Option<Needs> {
        Some(match name {
            "dp" => Needs::Dp,
            "tp" => Needs::Tp,
            "sp" => Needs::Sp,
            "pp" => Needs::Pp,
            "microbatches" => Needs::Microbatches,
            "multi-rank" => Needs::MultiRank,
            "three-ranks" => Needs::ThreeRanks,
            "ep" => Needs::Ep,
            "cp" => Needs::Cp,
            "experts" => Needs::Experts,
            "dense-mlp" => Needs::DenseMlp,
            "split-sequences" => Needs::SplitSequences,
            "edp" => Needs::Edp,
            "expert-groups" => Needs::ExpertGroups,
            "stage-ranks" => Needs::StageRanks,
            "capacity" => Needs::Capacity,
            "expert-bias" => Needs::ExpertBias,
            "model-parallel" => Needs::ModelParallel,
            "tp-replicated-experts" => Needs::TpReplicatedExperts,
            "sharded" => Needs::Sharded,
            "split-gradients" => Needs::SplitGradients,
            "interleaved" => Needs::Interleaved,
            "tp-without-sp" => Needs::TpWithoutSp,
            "resume" => Needs::Resume,
            "adamw" => Needs::Adamw,
            _ => return None,
        })
    }

    pub fn describe(self) -> &'static str {
        match self {
            Needs::Dp => "dp > 1",
            Needs::Tp => "tp > 1",
            Needs::Sp => "sp with tp > 1",
            Needs::Pp => "pp > 1",
            Needs::Microbatches => "microbatches > 1",
            Needs::MultiRank => "more than one rank",
            Needs::ThreeRanks => "three or more ranks",
            Needs::Ep => "ep > 1",
            Needs::Cp => "cp > 1",
            Needs::Experts => "a moe model",
            Needs::DenseMlp => "a dense MLP (llama)",
            Needs::SplitSequences => "sp with tp > 1, or cp > 1",
            Needs::Edp => "expert-dp > 1 (dp·tp·cp > ep·etp)",
            Needs::ExpertGroups => "expert-dp groups unlike the dense dp groups (ep·etp ≠ tp)",
            Needs::StageRanks => "more than one rank per pipeline stage",
            Needs::Capacity => "a moe model with capacity_factor",
            Needs::ExpertBias => "a moe model with expert_bias",
            Needs::TokenAux => "a moe model with aux_loss_normalization = \"token\"",
            Needs::ModelParallel => "parameters split over ranks (tp, pp, ep or etp > 1)",
            Needs::TpReplicatedExperts => "experts replicated over TP (tp > 1, ep·etp = 1)",
            Needs::Sharded => {
                "sharded data parallelism over several ranks (zero ≥ 1, dp·cp per shard group > 1)"
            }
            Needs::SplitGradients => {
                "gradients split over ranks (parameters split, or sharded data parallelism)"
            }
            Needs::Zero1 => "zero = 1",
            Needs::Zero2 => "zero = 2",
            Needs::Zero3 => "zero = 3 (FSDP)",
            Needs::TiedEmbeddings => "tied embeddings",
            Needs::Mtp => "a multi-token prediction layer (`mtp_layers = 1`)",
            Needs::LrSchedule => "a learning-rate schedule (warmup or decay)",
            Needs::Adamw => "the AdamW optimizer",
            Needs::WeightDecay => "weight decay set (`weight_decay`), norms exempt",
            Needs::Interleaved => "the interleaved pipeline schedule (pp > 1, virtual stages)",
            Needs::LabelSmoothing => "label smoothing set (`label_smoothing`)",
            Needs::PaddedVocab => "a vocabulary not divisible by tp (padded)",
            Needs::TpWithoutSp => "tp > 1 without sequence parallelism (the stream replicated)",
            Needs::AttentionDropout => "attention dropout set (`attention_dropout`)",
            Needs::HiddenDropout => "hidden dropout set (`hidden_dropout`)",
            Needs::Recompute => "activation recompute (`recompute`)",
            Needs::PackedSequences => "packed sequences (`packed_sequences`)",
            Needs::PaddedDocuments => "packed documents padded for CP (`pad_documents_to`)",
            Needs::Dropout => "dropout set (`attention_dropout` or `hidden_dropout`)",
            Needs::Resume => "a `[[resume]]` pair (saved on one mesh, resumed on another)",
            Needs::ResumeFromTp => "a `[[resume]]` pair saved from a mesh with tp > 1",
        }
    }
}

pub use crate::catalog::{find, names, Mutation, Needs, CATALOG};

/// `[mutations]` as written: which catalogued bugs to inject.
#[derive(Clone, Debug, Default)]
pub struct MutationSelection {
    /// Selected mutations, in catalog order.
    pub selected: Vec<&'static Mutation>,
    /// Where each selected mutation was named explicitly (not via `"all"`), for "applies to no
    /// mesh" warnings.
    pub written: Vec<(&'static str, Loc)>,
    pub loc: Option<Loc>,
}

impl MutationSelection {
    pub fn decode(cx: &mut Ctx<'_>, mut t: Table<'_, '_>) -> MutationSelection {
        let select = t.strings(cx, "select");
        let exclude = t.strings(cx, "exclude");
        let resolve = |cx: &mut Ctx<'_>, list: &Option<Located<Vec<Located<String>>>>| {
            let mut out: Vec<(&'static str, Loc, bool)> = Vec::new();
            for name in list.iter().flat_map(|l| l.value.iter()) {
                if name.value == "all" {
                    out.extend(CATALOG.iter().map(|m| (m.name, name.loc.clone(), false)));
                } else if let Some(m) = find(&name.value) {
                    out.push((m.name, name.loc.clone(), true));
                } else {
                    let mut all = names();
                    all.push("all");
                    cx.error(
                        Diagnostic::error(&name.loc, format!("unknown mutation `{}`", name.value))
                            .label("not in the catalog")
                            .help(suggest::did_you_mean(&name.value, &all, "mutation")),
                    );
                }
            }
            out
        };
        let selected = resolve(cx, &select);
        let excluded = resolve(cx, &exclude);
        let mut sel = MutationSelection {
            loc: Some(t.loc.clone()),
            ..Default::default()
        };
        for m in CATALOG {
            if excluded.iter().any(|(n, _, _)| *n == m.name) {
                continue;
            }
            if selected.iter().any(|(n, _, _)| *n == m.name) {
                sel.selected.push(m);
            }
            if let Some((_, loc, _)) = selected
                .iter()
                .find(|(n, _, explicit)| *n == m.name && *explicit)
            {
                sel.written.push((m.name, loc.clone()));
            }
        }
        t.finish(cx);
        sel
    }
}
