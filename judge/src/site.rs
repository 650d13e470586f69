//! Where a run first left the reference, and each value localization compared: what a
//! localization reports, apart from how it was found (the trace's walk in [`crate::locate`],
//! a gate's worst tensor in [`crate::gate_site`], a hypothesis in [`crate::cause`]).

use serde::{Deserialize, Serialize};

/// The phase of a site placed at a level's gate rather than found by the trace.
pub const GATE_PHASE: &str = "gate";

/// The phase of a site that is a reported metric (the logged loss), placed where the training
/// agreed and only the metric did not ([`crate::metric_only`]).
pub const METRIC_PHASE: &str = "metric";
/// The phase (and site) of a divergence in the rows a rank trained on, before any computation
/// ([`crate::inputs`]).
pub const INPUTS_PHASE: &str = "inputs";

/// Where a run first left the reference.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Site {
    pub step: usize,
    /// The row block that diverges first: DP replica and its microbatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub microbatch: Option<usize>,
    pub phase: String,
    /// The site path, e.g. `layers.0.mlp.in.bwd.out`.
    pub site: String,
    /// Which rank's copy of a replicated value (TP rank, or DP replica for finalized grads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<usize>,
    pub what: String,
    pub metric: String,
    // JSON writes inf (a value that could not be compared) as null; it reads back as inf.
    #[serde(deserialize_with = "crate::json::number_or_inf")]
    pub value: f64,
    pub limit: f64,
    /// The error-analysis bound at the site ([`crate::bound`]), for comparison with `limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<f64>,
}

/// One compared value, for the full table.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SiteRow {
    pub key: String,
    // JSON writes inf (a value that could not be compared) as null; it reads back as inf.
    #[serde(deserialize_with = "crate::json::number_or_inf")]
    pub relative_l2: f64,
    /// The error-analysis bound at this site ([`crate::bound`]), beside the calibrated limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<f64>,
}
