//! Per-tensor metrics as reported: derived from the scan's sums, with indices unravelled into
//! the tensor's shape.

use serde::{Serialize, Serializer};

use crate::agreement::{LogitAgreement, RoutingAgreement};
use crate::scan::{Stats, NONE};

/// JSON has no inf/nan; write them as strings instead of losing them.
pub fn num<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    if x.is_finite() {
        s.serialize_f64(*x)
    } else {
        s.collect_str(x)
    }
}

/// Flat index → multi-dimensional index.
pub fn unravel(mut flat: u64, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (i, &d) in shape.iter().enumerate().rev() {
        if d > 0 {
            idx[i] = (flat % d as u64) as usize;
            flat /= d as u64;
        }
    }
    idx
}

#[derive(Clone, Debug, Serialize)]
pub struct TensorMetrics {
    pub elements: u64,
    pub bit_exact: bool,
    /// Elements whose bits differ.
    pub bit_mismatched: u64,
    pub max_ulp: u64,
    #[serde(serialize_with = "num")]
    pub max_abs: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_abs_index: Option<Vec<usize>>,
    /// Over elements whose reference is non-zero.
    #[serde(serialize_with = "num")]
    pub max_rel: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rel_index: Option<Vec<usize>>,
    /// 100 · mean|c − r| / mean|r|.
    #[serde(serialize_with = "num")]
    pub mean_abs_pct: f64,
    /// ‖c − r‖ / ‖r‖.
    #[serde(serialize_with = "num")]
    pub relative_l2: f64,
    #[serde(serialize_with = "num")]
    pub cosine: f64,
    pub allclose: Allclose,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logits: Option<LogitAgreement>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingAgreement>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Allclose {
    pub atol: f64,
    pub rtol: f64,
    /// Elements with |c − r| > atol + rtol·|r|.
    pub mismatched: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worst_index: Option<Vec<usize>>,
}

fn ratio(num: f64, den: f64) -> f64 {
    if den > 0.0 {
        num / den
    } else if num == 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

impl TensorMetrics {
    pub fn from_stats(s: &Stats, shape: &[usize], atol: f64, rtol: f64) -> Self {
        let at = |i: u64| (i != NONE).then(|| unravel(i, shape));
        let cosine = {
            let den = (s.sum_sq_ref * s.sum_sq_cand).sqrt();
            if den > 0.0 {
                (s.dot / den).clamp(-1.0, 1.0)
            } else if s.sum_sq_ref == s.sum_sq_cand {
                1.0 // both all-zero: identical
            } else {
                0.0
            }
        };
        Self {
            elements: s.n,
            bit_exact: s.bit_diff == 0,
            bit_mismatched: s.bit_diff,
            max_ulp: s.max_ulp,
            max_abs: s.max_abs,
            max_abs_index: at(s.max_abs_at).filter(|_| s.max_abs > 0.0),
            max_rel: s.max_rel,
            max_rel_index: at(s.max_rel_at).filter(|_| s.max_rel > 0.0),
            mean_abs_pct: 100.0 * ratio(s.sum_abs_diff, s.sum_abs_ref),
            relative_l2: ratio(s.sum_sq_diff.sqrt(), s.sum_sq_ref.sqrt()),
            cosine,
            allclose: Allclose {
                atol,
                rtol,
                mismatched: s.mismatched,
                worst_index: at(s.worst_at),
            },
            logits: None,
            routing: None,
        }
    }

    /// A gated metric by its tolerance-table name.
    pub fn get(&self, metric: &str) -> Option<f64> {
        Some(match metric {
            "max_abs" => self.max_abs,
            "max_rel" => self.max_rel,
            "mean_abs_pct" => self.mean_abs_pct,
            "relative_l2" => self.relative_l2,
            "cosine" => self.cosine,
            "top1" => self.logits?.top1,
            "top1_decided" => self.logits?.top1_decided,
            "topk" => self.logits?.topk,
            "overlap" => self.routing?.overlap,
            "mismatch" => self.routing?.mismatch,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::TensorDtype;

    #[test]
    fn derived_metrics_by_hand() {
        let f = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        // ref [3, 4], cand [3, 5]: ‖d‖ = 1, ‖r‖ = 5, mean|d|/mean|r| = 0.5/3.5.
        let s = crate::scan::scan(
            TensorDtype::F32,
            &f(&[3.0, 4.0]),
            &f(&[3.0, 5.0]),
            0,
            0.0,
            0.0,
        );
        let m = TensorMetrics::from_stats(&s, &[1, 2], 0.0, 0.0);
        assert_eq!(m.relative_l2, 0.2);
        assert!((m.mean_abs_pct - 100.0 / 7.0).abs() < 1e-12);
        assert!((m.cosine - 29.0 / (5.0 * 34f64.sqrt())).abs() < 1e-12);
        assert_eq!(m.max_abs_index, Some(vec![0, 1]));
        assert_eq!(m.max_rel, 0.25);
        assert_eq!(m.allclose.mismatched, 1);
        assert!(!m.bit_exact);
        assert_eq!(unravel(7, &[2, 2, 3]), vec![1, 0, 1]);
    }
}
