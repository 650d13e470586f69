//! The schema of `[tolerances.NAME]`: limits per level and dtype, or `"exact"`.

use schemars::JsonSchema;

use crate::tolerance::CurveMode;

/// `"exact"` or a table of limits.
#[derive(JsonSchema)]
#[schemars(untagged)]
pub(super) enum LimitsOrExact {
    Exact(ExactKeyword),
    Limits(Limits),
}

#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum ExactKeyword {
    Exact,
}

/// Metric limits. Which keys a level accepts: forward: atol rtol max_abs max_rel mean_abs_pct
/// relative_l2 cosine top1 top1_decided topk k; routing: overlap mismatch failing_microbatches;
/// curve: mode rel
/// allowed_failing_steps investigate fail; oracle: the forward ones but top1/topk/k, plus
/// layer_average and grad_norm; trace: forward_ratio backward_ratio parameter_ratio
/// seed_ratio.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Limits {
    pub(super) atol: Option<f64>,
    pub(super) rtol: Option<f64>,
    pub(super) max_abs: Option<f64>,
    pub(super) max_rel: Option<f64>,
    pub(super) mean_abs_pct: Option<f64>,
    pub(super) relative_l2: Option<f64>,
    /// Minimum cosine similarity.
    pub(super) cosine: Option<f64>,
    /// Minimum fraction of tokens whose top-1 logit agrees.
    pub(super) top1: Option<f64>,
    /// Minimum top-1 agreement over the tokens whose reference top-two margin exceeds the
    /// dtype's round-off (near-ties reported apart).
    pub(super) top1_decided: Option<f64>,
    /// Minimum top-k agreement.
    pub(super) topk: Option<f64>,
    pub(super) k: Option<f64>,
    /// Minimum per-token set overlap of MoE top-k routing.
    pub(super) overlap: Option<f64>,
    /// Maximum fraction of tokens routed differently (over the run, and per microbatch).
    pub(super) mismatch: Option<f64>,
    /// Microbatches allowed over the mismatch fraction (routing; default 0).
    pub(super) failing_microbatches: Option<f64>,
    pub(super) mode: Option<CurveMode>,
    pub(super) rel: Option<f64>,
    pub(super) allowed_failing_steps: Option<f64>,
    pub(super) investigate: Option<f64>,
    pub(super) fail: Option<f64>,
    /// Gate on per-layer averages of the metrics (per-tensor rows are still reported).
    pub(super) layer_average: Option<bool>,
    /// Oracle level: the largest relative difference of the first step's global gradient
    /// norm (`grad_norm`, beside the gradients).
    pub(super) grad_norm: Option<f64>,
    /// Trace level: the largest relative L2 of a forward activation over its error-analysis
    /// bound (k·C^depth·ε), times which a traced site fails.
    pub(super) forward_ratio: Option<f64>,
    /// Trace level: the same for the backward's values, the gradients and the optimizer state.
    pub(super) backward_ratio: Option<f64>,
    /// Trace level: the same for parameters as each step computes with them.
    pub(super) parameter_ratio: Option<f64>,
    /// Trace level: the same for the loss's backward seed (the gradient arriving at the target
    /// logits and label smoothing's share: a rounding or two of 1/N, far inside its bound).
    pub(super) seed_ratio: Option<f64>,
}

/// Limits for one level: `"exact"`, or per dtype.
#[derive(JsonSchema)]
#[schemars(untagged)]
pub(super) enum LevelLimits {
    All(LimitsOrExact),
    PerDtype(PerDtype),
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct PerDtype {
    pub(super) f64: Option<LimitsOrExact>,
    pub(super) f32: Option<LimitsOrExact>,
    pub(super) f16: Option<LimitsOrExact>,
    pub(super) bf16: Option<LimitsOrExact>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Tolerances {
    /// Another table (or `builtin`) whose limits apply where this one has none.
    pub(super) extends: Option<String>,
    /// Always bit-exact.
    pub(super) roundtrip: Option<ExactKeyword>,
    pub(super) forward: Option<LevelLimits>,
    pub(super) routing: Option<LevelLimits>,
    pub(super) curve: Option<LevelLimits>,
    pub(super) oracle: Option<LevelLimits>,
    /// Every traced site against its own bound (the built-in engine; bf16 and f16 built in).
    pub(super) trace: Option<LevelLimits>,
}
