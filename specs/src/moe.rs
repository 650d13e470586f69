//! The `moe` family's router and capacity options: what a `[models.NAME]` table of family
//! `moe` may add beyond `experts` and `top_k`, each off (Mixtral-style softmax router, no
//! shared expert, dropless) unless written.

use std::hash::{Hash, Hasher};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::decode::{Ctx, Keyword, Table};
use crate::diagnostic::Diagnostic;
use crate::source::{Loc, Located};

/// How router logits become scores (Megatron's `moe_router_score_function`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RouterScore {
    /// softmax over the experts (Mixtral, DeepSeek-V2).
    #[default]
    Softmax,
    /// An independent sigmoid per expert (DeepSeek-V3); the load-balance loss uses the scores
    /// normalized over the experts.
    Sigmoid,
}

impl Keyword for RouterScore {
    const WHAT: &'static str = "router score function";
    const ALL: &'static [(&'static str, Self)] = &[
        ("softmax", RouterScore::Softmax),
        ("sigmoid", RouterScore::Sigmoid),
    ];
}

/// Which routed (token, expert) pairs an expert over its capacity drops (Megatron's
/// `moe_token_drop_policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DropPolicy {
    /// Keep the pairs with the highest router scores.
    #[default]
    Probs,
    /// Keep the earliest tokens of the sequence.
    Position,
}

impl Keyword for DropPolicy {
    const WHAT: &'static str = "drop policy";
    const ALL: &'static [(&'static str, Self)] = &[
        ("probs", DropPolicy::Probs),
        ("position", DropPolicy::Position),
    ];
}

/// What the load-balance loss averages its terms over (`aux_loss_normalization`): the two forms
/// Megatron's router takes (per microbatch of sequences, and with `--calculate-per-token-loss`
/// per token), each defined on the global batch at world size 1 so every mesh must keep it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AuxNormalization {
    /// Every sequence's term weighs the same: the mean over the global batch's sequences of
    /// α·Σ_e f_{s,e}·P_{s,e} (DeepSeek-V2, Megatron's `seq_aux_loss`).
    #[default]
    Sequence,
    /// Every real token weighs the same: each sequence's term times its real tokens T_s, over
    /// the global batch's counted tokens N (the cross-entropy's normalizer),
    /// α/N·Σ_s T_s·Σ_e f_{s,e}·P_{s,e} (the per-token loss form:
    /// Megatron's `--calculate-per-token-loss`, where the router pre-multiplies the aux loss by
    /// its token count and every gradient is divided by the global count).
    Token,
}

impl Keyword for AuxNormalization {
    const WHAT: &'static str = "load-balance normalization";
    const ALL: &'static [(&'static str, Self)] = &[
        ("sequence", AuxNormalization::Sequence),
        ("token", AuxNormalization::Token),
    ];
}

/// An expert capacity factor (> 0): a number that takes part in a model's identity, compared
/// and hashed by its bits.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CapacityFactor(pub f64);

impl PartialEq for CapacityFactor {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for CapacityFactor {}

impl Hash for CapacityFactor {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

/// The `moe` options of a model configuration (all `None`: the defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MoeOptions {
    /// Router score function (`None`: softmax).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterScore>,
    /// A per-expert score-correction bias added to the scores for top-k selection only (not to
    /// the weights), updated after every step by a fixed rate towards balanced load (DeepSeek-V3's
    /// auxiliary-loss-free balancing; Megatron's `moe_router_enable_expert_bias`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_bias: Option<bool>,
    /// Hidden size of a shared expert every token goes through beside its routed ones
    /// (Megatron's `moe_shared_expert_intermediate_size`; `None`: no shared expert).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_expert_ffn: Option<u32>,
    /// Expert capacity per sequence: ⌈factor · k · tokens / experts⌉ (routed pairs over it are
    /// dropped by `drop_policy`); `None`: dropless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_factor: Option<CapacityFactor>,
    /// With a capacity factor: which pairs are dropped (`None`: probs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_policy: Option<DropPolicy>,
    /// What the load-balance loss averages over (`None`: per sequence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aux_loss_normalization: Option<AuxNormalization>,
}

/// The score-correction bias's update rate per step (Megatron's
/// `moe_router_bias_update_rate` default).
pub const BIAS_UPDATE_RATE: f64 = 1e-3;

impl MoeOptions {
    pub fn router(&self) -> RouterScore {
        self.router.unwrap_or_default()
    }

    pub fn expert_bias(&self) -> bool {
        self.expert_bias == Some(true)
    }

    pub fn aux_normalization(&self) -> AuxNormalization {
        self.aux_loss_normalization.unwrap_or_default()
    }

    /// The capacity factor and drop policy, when tokens may be dropped.
    pub fn capacity(&self) -> Option<(f64, DropPolicy)> {
        self.capacity_factor
            .map(|c| (c.0, self.drop_policy.unwrap_or_default()))
    }
}

/// The moe keys of a `[models.NAME]` table, checked where they are written: each only for
/// family `moe` (`family` says which), `drop_policy` only beside `capacity_factor`. The shared
/// expert's size comes back located too: mesh rules (divisible by tp) point at it.
pub fn decode(
    cx: &mut Ctx<'_>,
    t: &mut Table<'_, '_>,
    moe: bool,
    unmoe: &mut Vec<(&'static str, Loc)>,
) -> (MoeOptions, Option<Located<u32>>) {
    let router = t.keyword::<RouterScore>(cx, "router");
    let expert_bias = t.bool(cx, "expert_bias");
    let shared = t.positive(cx, "shared_expert_ffn");
    let factor = t.limit(cx, "capacity_factor");
    let policy = t.keyword::<DropPolicy>(cx, "drop_policy");
    let normalization = t.keyword::<AuxNormalization>(cx, "aux_loss_normalization");
    let written = [
        router.as_ref().map(|v| ("router", &v.loc)),
        expert_bias.as_ref().map(|v| ("expert_bias", &v.loc)),
        shared.as_ref().map(|v| ("shared_expert_ffn", &v.loc)),
        factor.as_ref().map(|v| ("capacity_factor", &v.loc)),
        policy.as_ref().map(|v| ("drop_policy", &v.loc)),
        normalization
            .as_ref()
            .map(|v| ("aux_loss_normalization", &v.loc)),
    ];
    if !moe {
        unmoe.extend(written.into_iter().flatten().map(|(k, l)| (k, l.clone())));
        return (MoeOptions::default(), None);
    }
    if let Some(f) = factor.as_ref().filter(|f| f.value <= 0.0) {
        cx.error(
            Diagnostic::error(
                &f.loc,
                format!("`{}.capacity_factor` must be greater than 0", t.path),
            )
            .label("no expert could take a token")
            .help("1.0 gives each expert its balanced share; leave it out for dropless routing"),
        );
    }
    if let (Some(p), None) = (&policy, &factor) {
        cx.error(
            Diagnostic::error(
                &p.loc,
                format!("`{}.drop_policy` without `capacity_factor`", t.path),
            )
            .label("nothing is dropped without a capacity")
            .help("add `capacity_factor = 1.25` (say), or remove `drop_policy`"),
        );
    }
    let options = MoeOptions {
        router: router.map(|r| r.value),
        expert_bias: expert_bias.map(|b| b.value),
        shared_expert_ffn: shared.as_ref().map(|s| s.value),
        capacity_factor: factor.map(|f| CapacityFactor(f.value)),
        drop_policy: policy.map(|p| p.value),
        aux_loss_normalization: normalization.map(|n| n.value),
    };
    (options, shared)
}
