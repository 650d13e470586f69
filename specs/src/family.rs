//! Built-in model families and what each can be checked for.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::decode::Keyword;
use crate::level::Level;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Dense decoder-only transformer (RMSNorm, RoPE, GQA, SwiGLU).
    Llama,
    /// The dense transformer with a top-k routed mixture-of-experts MLP.
    Moe,
}

impl Keyword for Family {
    const WHAT: &'static str = "family";
    const ALL: &'static [(&'static str, Self)] = &[("llama", Family::Llama), ("moe", Family::Moe)];
}

impl Family {
    /// Levels this family can be checked at, in DAG order. A dense model has no router, so
    /// there is nothing for `routing` to compare. `trace` is judged where the tolerance table
    /// has limits for it (see [`crate::expand`]).
    pub fn levels(self) -> &'static [Level] {
        match self {
            Family::Llama => &[
                Level::Roundtrip,
                Level::Forward,
                Level::Curve,
                Level::Oracle,
                Level::Trace,
            ],
            Family::Moe => &[
                Level::Roundtrip,
                Level::Forward,
                Level::Routing,
                Level::Curve,
                Level::Oracle,
                Level::Trace,
            ],
        }
    }

    pub fn has_experts(self) -> bool {
        self == Family::Moe
    }

    pub fn as_str(self) -> &'static str {
        self.name()
    }
}
