//! Check levels: what a job verifies about a mesh against its oracle.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::decode::Keyword;

/// Levels in DAG order: each level of a (model, mesh) runs after the previous selected one,
/// because a mesh that cannot round-trip its checkpoint has no business comparing gradients.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Full checkpoint → per-rank shards → merged back; bit-identical.
    Roundtrip,
    /// Logits and loss on one batch vs the oracle.
    Forward,
    /// MoE router top-k choices vs the oracle (MoE families only).
    Routing,
    /// Per-step losses over the run's training steps.
    Curve,
    /// Per-parameter gradients and updated weights after k steps.
    Oracle,
    /// Every traced site of the first step (activations, gradients, parameters as computed
    /// with), each held to its own error-analysis bound times a calibrated factor: what an
    /// aggregate gate sized for the whole model's round-off lets through in bf16 (one site
    /// 2–3× its own expected round-off) fails here. Comes with `oracle` wherever the cell's
    /// tolerance table has limits for it (bf16 and f16 in the built-in table).
    Trace,
}

impl Keyword for Level {
    const WHAT: &'static str = "level";
    const ALL: &'static [(&'static str, Self)] = &[
        ("roundtrip", Level::Roundtrip),
        ("forward", Level::Forward),
        ("routing", Level::Routing),
        ("curve", Level::Curve),
        ("oracle", Level::Oracle),
        ("trace", Level::Trace),
    ];
}

impl Level {
    pub fn as_str(self) -> &'static str {
        self.name()
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
