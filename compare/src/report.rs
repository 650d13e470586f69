//! What a comparison found, as data: serialized by `--json`, rendered by `render`.

use serde::Serialize;

use crate::metrics::{num, TensorMetrics};
use crate::tolerance::TensorLimits;

/// Bumped on incompatible changes of the JSON layout.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Match,
    /// Noise-floor ratio between the investigate and fail thresholds: not a failure, but look.
    Investigate,
    Mismatch,
}

/// A structural problem: always fatal, reported before any metric.
#[derive(Clone, Debug, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    Missing,
    Extra,
    ShapeMismatch,
    DtypeMismatch,
    NonFinite,
    AllZero,
    MissingSteps,
    ExtraSteps,
    DuplicateStep,
    /// A step number lower than one on an earlier line.
    OutOfOrder,
    MissingMetric,
    NotNumeric,
}

/// A limit a value broke.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub metric: String,
    #[serde(serialize_with = "num")]
    pub value: f64,
    pub limit: f64,
    /// `max` (value must be ≤ limit) or `min` (value must be ≥ limit).
    pub bound: &'static str,
    /// Set when the gate applied to a layer average rather than to this tensor alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<usize>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TensorResult {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<usize>,
    pub metrics: TensorMetrics,
    pub limits: TensorLimits,
    pub failures: Vec<Failure>,
    pub passed: bool,
}

/// Layer-averaged metrics (tensors whose names carry a layer index).
#[derive(Clone, Debug, Serialize)]
pub struct LayerResult {
    pub layer: usize,
    pub tensors: usize,
    /// Mean over the layer's tensors of each gated continuous metric.
    pub means: Vec<(String, f64)>,
    pub failures: Vec<Failure>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct TensorCounts {
    pub tensors_compared: usize,
    pub elements_compared: u64,
    pub tensors_failed: usize,
    pub layers_failed: usize,
    pub structural_problems: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct TensorReport {
    pub format_version: u32,
    pub kind: &'static str,
    pub reference: String,
    pub candidate: String,
    pub profile: String,
    pub verdict: Verdict,
    pub counts: TensorCounts,
    pub problems: Vec<Problem>,
    /// Things the reader should know that are not failures (e.g. a gate nothing could feed).
    pub notes: Vec<String>,
    pub tensors: Vec<TensorResult>,
    pub layers: Vec<LayerResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MetricResult {
    pub name: String,
    /// Performance metrics (`*time*`, `*tok*`, `*mem*`) are reported, not gated, unless asked.
    pub gated: bool,
    pub steps: usize,
    /// Steps over the limit (`rel`/`exact`), in order.
    pub failing_steps: Vec<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worst_step: Option<u64>,
    #[serde(serialize_with = "num")]
    pub worst_rel: f64,
    #[serde(serialize_with = "num")]
    pub max_abs: f64,
    /// Noise floor: mean |b0 − b1| over steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envelope: Option<f64>,
    /// Noise floor: mean |b0 − candidate| over steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<f64>,
    /// signal / envelope.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_num")]
    pub ratio: Option<f64>,
    /// Mean over the compared steps, each side: what a performance figure (step time, memory,
    /// throughput) is read by, base beside feature.
    #[serde(serialize_with = "num")]
    pub reference_mean: f64,
    #[serde(serialize_with = "num")]
    pub candidate_mean: f64,
    pub verdict: Verdict,
}

fn opt_num<S: serde::Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => num(x, s),
        None => s.serialize_none(),
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CurveCounts {
    pub steps_compared: usize,
    pub metrics_compared: usize,
    pub points_compared: usize,
    pub metrics_failed: usize,
    pub structural_problems: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct CurveReport {
    pub format_version: u32,
    pub kind: &'static str,
    pub reference: String,
    pub candidate: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline2: Option<String>,
    pub mode: String,
    pub limits: meshparity_specs::Limits,
    pub verdict: Verdict,
    pub counts: CurveCounts,
    pub problems: Vec<Problem>,
    /// Things the reader should know that are not failures (metrics only the candidate logs,
    /// a zero noise floor and what judged instead).
    pub notes: Vec<String>,
    pub metrics: Vec<MetricResult>,
}

/// A problem with the tensor `name`.
pub(crate) fn problem(kind: ProblemKind, name: &str, message: String) -> Problem {
    Problem {
        kind,
        name: Some(name.to_owned()),
        message,
    }
}
