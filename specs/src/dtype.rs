//! Floating-point formats a model can run in.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::decode::Keyword;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F64,
    F32,
    F16,
    Bf16,
}

impl Keyword for DType {
    const WHAT: &'static str = "dtype";
    const ALL: &'static [(&'static str, Self)] = &[
        ("f64", DType::F64),
        ("f32", DType::F32),
        ("f16", DType::F16),
        ("bf16", DType::Bf16),
    ];
    const ALIASES: &'static [(&'static str, &'static str)] = &[
        ("bfloat16", "bf16"),
        ("float16", "f16"),
        ("half", "f16"),
        ("fp16", "f16"),
        ("float32", "f32"),
        ("float", "f32"),
        ("fp32", "f32"),
        ("float64", "f64"),
        ("double", "f64"),
        ("fp64", "f64"),
    ];
}

impl DType {
    pub fn as_str(self) -> &'static str {
        self.name()
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
