//! Comparing two checkpoints: structure first (always fatal), then every common tensor in
//! parallel chunks, then gating — per tensor, or per layer average where the limits ask.

use std::collections::BTreeMap;
use std::path::Path;

use rayon::prelude::*;

use crate::agreement;
use crate::align::{line_up, with_casts, Lined, Pair};
use crate::checkpoint::Checkpoint;
use crate::error::InputError;
use crate::metrics::{unravel, TensorMetrics};
pub use crate::options::{globs, TensorOptions};
use crate::report::{
    problem, Failure, LayerResult, Problem, ProblemKind, TensorCounts, TensorReport, TensorResult,
    Verdict, FORMAT_VERSION,
};
use crate::scan::{self, Stats};
use crate::tolerance;

/// Elements per parallel work item: big enough to amortize scheduling, small enough that one
/// huge embedding table still spreads over every core.
const CHUNK: usize = 1 << 18;

/// The layer index in a parameter name: the first all-digit dotted segment
/// (`model.layers.3.mlp.up.weight` → 3).
pub fn layer_of(name: &str) -> Option<usize> {
    name.split('.')
        .find(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))?
        .parse()
        .ok()
}

pub fn compare_checkpoints(
    reference: &Path,
    candidate: &Path,
    opts: &TensorOptions,
) -> Result<TensorReport, InputError> {
    let a = Checkpoint::open(reference)?;
    let b = Checkpoint::open(candidate)?;
    compare(&a, &b, opts)
}

pub fn compare(
    a: &Checkpoint,
    b: &Checkpoint,
    opts: &TensorOptions,
) -> Result<TensorReport, InputError> {
    let Lined {
        pairs,
        casts,
        mut problems,
        mut notes,
    } = line_up(a, b, opts);
    let pairs = with_casts(pairs, &casts, opts, &mut notes);
    something_compared(&pairs, &problems, (a, b))?;
    let stats = scan_all(&pairs);
    let mut results = measure(&pairs, &stats, opts);
    for (r, s) in results.iter().zip(&stats) {
        structural_from_scan(r, s, &mut problems);
    }
    let layers = gate(&mut results, &mut notes);
    let fed = |r: &TensorResult| {
        r.limits.exact
            || r.limits
                .gates
                .iter()
                .any(|(m, _)| m == "allclose" || r.metrics.get(m).is_some())
    };
    if !results.iter().any(fed) {
        return Err(InputError::NothingGated(format!(
            "profile `{}` with these settings puts no limit on any of the {} tensors (a curve \
             profile on checkpoints?); name a tensor profile (default, exact, forward-f32, \
             oracle-bf16, ...) or a limit with -t",
            opts.tolerance.profile.name(),
            results.len()
        )));
    }
    let counts = TensorCounts {
        tensors_compared: results.len(),
        elements_compared: results.iter().map(|r| r.metrics.elements).sum(),
        tensors_failed: results.iter().filter(|r| !r.passed).count(),
        layers_failed: layers.iter().filter(|l| !l.failures.is_empty()).count(),
        structural_problems: problems.len(),
    };
    let verdict = if problems.is_empty() && counts.tensors_failed == 0 {
        Verdict::Match
    } else {
        Verdict::Mismatch
    };
    Ok(TensorReport {
        format_version: FORMAT_VERSION,
        kind: "tensors",
        reference: a.path.display().to_string(),
        candidate: b.path.display().to_string(),
        profile: opts.tolerance.profile.name(),
        verdict,
        counts,
        problems,
        notes,
        tensors: results,
        layers,
    })
}

/// Comparing nothing is an error: no tensor the two sides share, or only empty ones.
fn something_compared(
    pairs: &[Pair<'_>],
    problems: &[Problem],
    (a, b): (&Checkpoint, &Checkpoint),
) -> Result<(), InputError> {
    if pairs.is_empty() {
        return Err(InputError::NothingCompared(format!(
            "no tensor has the same name, dtype and shape in both checkpoints (reference {} tensors, candidate {}); {} structural problem(s):\n{}",
            a.len(),
            b.len(),
            problems.len(),
            list_problems(problems)
        )));
    }
    // Tensors of no elements agree with anything: a comparison of only those compared nothing.
    if pairs.iter().all(|p| p.a.is_empty()) {
        return Err(InputError::NothingCompared(format!(
            "every tensor both checkpoints hold has no elements ({} tensor(s): {})",
            pairs.len(),
            pairs
                .iter()
                .take(5)
                .map(|p| format!("`{}` {:?}", p.name, p.a.shape))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}

/// Each pair's metrics from its scan (and its logits' or routing's agreement where the options
/// name it), not yet gated.
fn measure(pairs: &[Pair<'_>], stats: &[Stats], opts: &TensorOptions) -> Vec<TensorResult> {
    let k = tolerance::top_k(&opts.tolerance);
    pairs
        .par_iter()
        .zip(stats.par_iter())
        .map(|(p, s)| {
            let mut m = TensorMetrics::from_stats(s, p.a.shape, p.limits.atol, p.limits.rtol);
            if opts.logits.is_match(p.name) {
                m.logits = agreement::logits(p.a.dtype, p.a.shape, p.a.bytes, p.b.bytes, k);
            }
            if opts.routing.is_match(p.name) {
                m.routing = agreement::routing(p.a.dtype, p.a.shape, p.a.bytes, p.b.bytes);
            }
            TensorResult {
                name: p.name.to_owned(),
                dtype: p.a.dtype.to_string(),
                shape: p.a.shape.to_vec(),
                layer: layer_of(p.name),
                failures: Vec::new(),
                passed: true,
                metrics: m,
                limits: p.limits.clone(),
            }
        })
        .collect()
}

/// Up to 20 problems, one per line, and how many more there are.
fn list_problems(problems: &[Problem]) -> String {
    let mut lines: Vec<String> = problems
        .iter()
        .take(20)
        .map(|p| format!("  {}", p.message))
        .collect();
    if problems.len() > 20 {
        lines.push(format!("  ... and {} more", problems.len() - 20));
    }
    lines.join("\n")
}

/// Every pair split into chunks, scanned in parallel, merged back per tensor.
fn scan_all(pairs: &[Pair<'_>]) -> Vec<Stats> {
    let mut work = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        let size = p.a.dtype.size();
        let n = p.a.len();
        let mut start = 0;
        while start < n || (n == 0 && start == 0) {
            let end = (start + CHUNK).min(n);
            work.push((i, start, end, size));
            if n == 0 {
                break;
            }
            start = end;
        }
    }
    let partial: Vec<(usize, Stats)> = work
        .par_iter()
        .map(|&(i, start, end, size)| {
            let p = &pairs[i];
            let (ba, bb) = (
                &p.a.bytes[start * size..end * size],
                &p.b.bytes[start * size..end * size],
            );
            (
                i,
                scan::scan(
                    p.a.dtype,
                    ba,
                    bb,
                    start as u64,
                    p.limits.atol,
                    p.limits.rtol,
                ),
            )
        })
        .collect();
    let mut out = vec![Stats::default(); pairs.len()];
    for (i, s) in &partial {
        out[*i].merge(s);
    }
    out
}

fn structural_from_scan(r: &TensorResult, s: &Stats, problems: &mut Vec<Problem>) {
    for (count, first, side) in [
        (s.nonfinite_ref, s.first_nonfinite_ref, "reference"),
        (s.nonfinite_cand, s.first_nonfinite_cand, "candidate"),
    ] {
        if count > 0 {
            problems.push(problem(
                ProblemKind::NonFinite,
                &r.name,
                format!(
                    "`{}`: {count} NaN/Inf element(s) in the {side}, first at {:?}",
                    r.name,
                    unravel(first, &r.shape)
                ),
            ));
        }
    }
    if s.nonzero_cand == 0 && s.nonzero_ref > 0 && s.nonfinite_cand == 0 {
        problems.push(problem(
            ProblemKind::AllZero,
            &r.name,
            format!(
                "`{}`: the candidate is all zeros where the reference has {} non-zero element(s)",
                r.name, s.nonzero_ref
            ),
        ));
    }
}

fn check(metric: &str, value: f64, limit: f64, layer: Option<usize>) -> Option<Failure> {
    let min = tolerance::is_minimum(metric);
    let ok = if min { value >= limit } else { value <= limit };
    (!ok).then(|| Failure {
        metric: metric.to_owned(),
        value,
        limit,
        bound: if min { "min" } else { "max" },
        layer,
    })
}

/// A tensor's name with its expert index folded (`…experts.3.up.weight` → `…experts.*.up.weight`),
/// so that a layer average counts every expert's copy of a tensor once together.
pub fn expert_folded(name: &str) -> String {
    let parts: Vec<&str> = name.split('.').collect();
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let expert_index = i > 0
                && parts[i - 1] == "experts"
                && !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit());
            if expert_index {
                "*"
            } else {
                p
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Continuous metrics that layer averaging applies to; bit-exactness and allclose stay per element.
pub fn averaged(metric: &str) -> bool {
    matches!(
        metric,
        "max_abs" | "max_rel" | "mean_abs_pct" | "relative_l2" | "cosine"
    )
}

fn gate(results: &mut [TensorResult], notes: &mut Vec<String>) -> Vec<LayerResult> {
    let mut layer_members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut unfed: Vec<String> = Vec::new();
    for (i, r) in results.iter_mut().enumerate() {
        let by_layer = r.limits.layer_average && r.layer.is_some();
        if by_layer {
            layer_members
                .entry(r.layer.expect("checked"))
                .or_default()
                .push(i);
        }
        if r.limits.exact && !r.metrics.bit_exact {
            r.failures.push(Failure {
                metric: "bit_exact".into(),
                value: r.metrics.bit_mismatched as f64,
                limit: 0.0,
                bound: "max",
                layer: None,
            });
        }
        for (metric, limit) in r.limits.gates.clone() {
            if metric == "allclose" {
                if r.metrics.allclose.mismatched > 0 {
                    r.failures.push(Failure {
                        metric: "allclose".into(),
                        value: r.metrics.allclose.mismatched as f64,
                        limit: 0.0,
                        bound: "max",
                        layer: None,
                    });
                }
                continue;
            }
            if by_layer && averaged(&metric) {
                continue;
            }
            match r.metrics.get(&metric) {
                Some(v) => r.failures.extend(check(&metric, v, limit, None)),
                None if !unfed.contains(&metric) => unfed.push(metric),
                None => {}
            }
        }
    }
    for m in unfed {
        let feeds_any = results.iter().any(|r| r.metrics.get(&m).is_some());
        if !feeds_any {
            notes.push(format!(
                "`{m}` is gated but no tensor provides it (logits are matched by --logits, routing by --routing)"
            ));
        }
    }
    let mut layers = Vec::new();
    for (layer, members) in layer_members {
        let mut means: Vec<(String, f64)> = Vec::new();
        let gates: Vec<(String, f64)> = results[members[0]]
            .limits
            .gates
            .iter()
            .filter(|(m, _)| averaged(m))
            .cloned()
            .collect();
        let mut failures = Vec::new();
        for (metric, limit) in gates {
            // Expert-averaged (as ART's oracle harness does): each expert's tensors are first
            // averaged over the experts, so a layer's 64 experts weigh as one MLP, not 64.
            let mut groups: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for &i in &members {
                if let Some(v) = results[i].metrics.get(&metric) {
                    groups
                        .entry(expert_folded(&results[i].name))
                        .or_default()
                        .push(v);
                }
            }
            let values: Vec<f64> = groups
                .values()
                .map(|v| v.iter().sum::<f64>() / v.len() as f64)
                .collect();
            let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
            means.push((metric.clone(), mean));
            failures.extend(check(&metric, mean, limit, Some(layer)));
        }
        for &i in &members {
            results[i].failures.extend(failures.iter().cloned());
        }
        layers.push(LayerResult {
            layer,
            tensors: members.len(),
            means,
            failures,
        });
    }
    for r in results.iter_mut() {
        r.passed = r.failures.is_empty();
    }
    layers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_index_from_names() {
        assert_eq!(layer_of("model.layers.3.mlp.up.weight"), Some(3));
        assert_eq!(
            expert_folded("layers.1.mlp.experts.12.up.weight"),
            "layers.1.mlp.experts.*.up.weight"
        );
        assert_eq!(
            expert_folded("layers.1.mlp.up.weight"),
            "layers.1.mlp.up.weight"
        );
        assert_eq!(layer_of("h.12.attn"), Some(12));
        assert_eq!(layer_of("embed.weight"), None);
        assert_eq!(layer_of("layer2.weight"), None);
    }
}
