//! Every limit a comparison had in force, with the value it was held against: the evidence of
//! *how close* a check came, not only whether it passed. Calibration sweeps read these to report
//! headroom (correct runs) and margin (injected bugs), and reports print the closest one.

use meshparity_compare::curve::rel_limit;
use meshparity_compare::render::sci;
use meshparity_compare::report::{CurveReport, Problem, TensorReport};
use meshparity_compare::tensors::averaged;
use meshparity_compare::tolerance::is_minimum;
use serde::{Deserialize, Serialize};

/// One limit in force and the value measured against it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    /// The comparison it belongs to: `logits and loss`, `losses`, `gradients`, `updates`...
    pub scope: String,
    /// What was measured: a tensor name, `layer N` (a layer average) or a curve metric.
    pub subject: String,
    pub metric: String,
    #[serde(deserialize_with = "crate::json::number_or_inf")]
    pub value: f64,
    #[serde(deserialize_with = "crate::json::number_or_inf")]
    pub limit: f64,
    /// `max` (value must be ≤ limit) or `min` (value must be ≥ limit).
    pub bound: String,
    /// The value in units of the limit, so that above 1 fails: `value / limit` for a maximum,
    /// `(1 − value) / (1 − limit)` for a minimum (cosine, agreement). 0 is a perfect match;
    /// infinite where a limit of 0 (or a minimum of 1) is missed at all.
    #[serde(deserialize_with = "crate::json::number_or_inf")]
    pub ratio: f64,
}

impl Gate {
    pub fn new(subject: String, metric: &str, value: f64, limit: f64) -> Self {
        let min = is_minimum(metric);
        Self {
            scope: String::new(),
            subject,
            metric: metric.to_owned(),
            value,
            limit,
            bound: if min { "min" } else { "max" }.to_owned(),
            ratio: ratio(value, limit, min),
        }
    }

    pub fn failed(&self) -> bool {
        self.ratio > 1.0 || self.ratio.is_nan()
    }

    /// `` `layers.0.mlp.up.weight` relative_l2 3.1e-6 (limit ≤ 1e-4, 0.031×) ``.
    pub fn describe(&self) -> String {
        let op = if self.bound == "min" { "≥" } else { "≤" };
        let scope = if self.scope.is_empty() {
            String::new()
        } else {
            format!("{} ", self.scope)
        };
        format!(
            "{scope}`{}` {} {} (limit {op} {}, {}× the limit)",
            self.subject,
            self.metric,
            sci(self.value),
            sci(self.limit),
            times(self.ratio)
        )
    }
}

/// A ratio for people: `0.031`, `1.2e4`, `inf`.
pub fn times(r: f64) -> String {
    if r.is_infinite() {
        "inf".into()
    } else if r != 0.0 && !(1e-3..1e4).contains(&r) {
        format!("{r:.1e}")
    } else {
        format!("{}", (r * 1000.0).round() / 1000.0)
    }
}

fn ratio(value: f64, limit: f64, min: bool) -> f64 {
    let (miss, room) = if min {
        (1.0 - value, 1.0 - limit)
    } else {
        (value, limit)
    };
    if miss.is_nan() {
        f64::NAN
    } else if room > 0.0 {
        miss.max(0.0) / room
    } else if miss <= 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

/// The gates of a tensor comparison: per tensor, except metrics gated on layer averages, which
/// appear once per layer.
pub fn of_tensors(r: &TensorReport) -> Vec<Gate> {
    let mut out = structural(&r.problems);
    for t in &r.tensors {
        let by_layer = t.limits.layer_average && t.layer.is_some();
        if t.limits.exact {
            let v = t.metrics.bit_mismatched as f64;
            out.push(Gate::new(t.name.clone(), "bit_exact", v, 0.0));
        }
        for (metric, limit) in &t.limits.gates {
            if metric == "allclose" {
                let v = t.metrics.allclose.mismatched as f64;
                out.push(Gate::new(t.name.clone(), "allclose", v, 0.0));
            } else if by_layer && averaged(metric) {
                continue;
            } else if let Some(v) = t.metrics.get(metric) {
                out.push(Gate::new(t.name.clone(), metric, v, *limit));
            }
        }
    }
    for layer in &r.layers {
        let Some(first) = r.tensors.iter().find(|t| t.layer == Some(layer.layer)) else {
            continue;
        };
        for (metric, mean) in &layer.means {
            if let Some((_, limit)) = first.limits.gates.iter().find(|(m, _)| m == metric) {
                out.push(Gate::new(
                    format!("layer {}", layer.layer),
                    metric,
                    *mean,
                    *limit,
                ));
            }
        }
    }
    out
}

/// Structural problems (missing tensors, NaN, replicas that disagree...) are always fatal: a
/// gate of limit 0 each, so they count as infinitely far past it.
pub fn structural(problems: &[Problem]) -> Vec<Gate> {
    problems
        .iter()
        .map(|p| {
            let kind = serde_json::to_value(p.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "structural".into());
            Gate::new(p.name.clone().unwrap_or_default(), &kind, 1.0, 0.0)
        })
        .collect()
}

/// The gates of a curve comparison: the worst step of each gated metric against `rel`.
pub fn of_curve(r: &CurveReport) -> Vec<Gate> {
    let mut out = structural(&r.problems);
    for m in r.metrics.iter().filter(|m| m.gated) {
        match (m.ratio, rel_limit(&r.limits, &m.name)) {
            (Some(ratio), _) => {
                let fail = r.limits.metrics.get("fail").copied().unwrap_or(5.0);
                out.push(Gate::new(m.name.clone(), "noise_ratio", ratio, fail));
            }
            (None, Some(rel)) => {
                // With `allowed_failing_steps`, the gate is the worst step that still counts.
                let allowed = r
                    .limits
                    .metrics
                    .get("allowed_failing_steps")
                    .copied()
                    .unwrap_or(0.0) as usize;
                let value = if m.failing_steps.len() > allowed || allowed == 0 {
                    m.worst_rel
                } else {
                    0.0
                };
                out.push(Gate::new(m.name.clone(), "rel", value, rel));
            }
            (None, None) => {
                let v = m.failing_steps.len() as f64;
                out.push(Gate::new(m.name.clone(), "exact", v, 0.0));
            }
        }
    }
    out
}

/// The gate that came closest to (or furthest past) its limit.
pub fn closest<'a>(gates: impl IntoIterator<Item = &'a Gate>) -> Option<&'a Gate> {
    gates
        .into_iter()
        .max_by(|a, b| nan_high(a.ratio).total_cmp(&nan_high(b.ratio)))
}

fn nan_high(x: f64) -> f64 {
    if x.is_nan() {
        f64::INFINITY
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_put_the_limit_at_one() {
        assert!((Gate::new("w".into(), "relative_l2", 2e-6, 1e-4).ratio - 0.02).abs() < 1e-12);
        assert!(Gate::new("w".into(), "relative_l2", 2e-3, 1e-4).failed());
        let c = Gate::new("w".into(), "cosine", 0.9995, 0.999);
        assert!((c.ratio - 0.5).abs() < 1e-9 && !c.failed());
        assert_eq!(Gate::new("w".into(), "allclose", 0.0, 0.0).ratio, 0.0);
        assert!(Gate::new("w".into(), "allclose", 3.0, 0.0)
            .ratio
            .is_infinite());
        assert!(Gate::new("w".into(), "top1", 0.99, 1.0).failed());
        assert!(Gate::new("w".into(), "relative_l2", f64::NAN, 1.0).failed());
        assert_eq!(times(0.0312), "0.031");
        assert_eq!(times(2.5e5), "2.5e5");
    }
}
