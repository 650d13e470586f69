//! Metric curves: JSON Lines, one object per step (`{"step": 1, "loss": 2.31, ...}`).
//!
//! Modes: `exact` (bits equal), `rel` (per-step |c − r|/|r| under `rel`, with
//! `allowed_failing_steps` slack) and `noise-floor` (a second baseline run gives the run-to-run
//! envelope mean|b0 − b1|; the signal mean|b0 − c| over it must stay under `investigate`, and
//! at or past `fail` it fails). Metrics whose names say time, tokens or memory are performance
//! figures: reported, never gated unless asked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use meshparity_specs::tolerance::GRAD_NORM;
use meshparity_specs::{CurveMode, Limits};

mod read;

pub use read::{read_curve, read_curve_keyed};

use crate::error::InputError;
use crate::report::{
    CurveCounts, CurveReport, MetricResult, Problem, ProblemKind, Verdict, FORMAT_VERSION,
};

/// One run's metrics by step.
#[derive(Debug)]
pub struct Curve {
    pub path: PathBuf,
    pub steps: BTreeMap<u64, IndexMap<String, f64>>,
    /// Line of each step, for messages.
    pub lines: BTreeMap<u64, usize>,
    /// Duplicate steps and non-finite values, found while reading.
    pub problems: Vec<Problem>,
}

/// Performance figures by name: reported, not gated (the rule lives with the spec, which
/// refuses to gate them).
pub use meshparity_specs::performance::is_performance;

pub struct CurveOptions {
    pub limits: Limits,
    /// The key that numbers steps (`step`, `iteration`, ...).
    pub step_key: String,
    /// A second baseline run, for the noise-floor mode.
    pub baseline2: Option<PathBuf>,
    /// Gate performance metrics too.
    pub gate_performance: bool,
}

/// The per-step `rel` limit a noise-floor comparison falls back to when its baselines are
/// bit-identical and the spec or command line gives none (f32 round-off in a loss, with room).
pub const ZERO_FLOOR_REL: f64 = 1e-5;

fn limit(limits: &Limits, key: &str, default: f64) -> f64 {
    limits.metrics.get(key).copied().unwrap_or(default)
}

/// The per-step relative limit of metric `name` in `rel` mode: the gradient norm's own where
/// the table has one (the curve level's `grad_norm` key), else the curve's `rel`.
pub fn rel_limit(limits: &Limits, name: &str) -> Option<f64> {
    let own = (name == GRAD_NORM)
        .then(|| limits.metrics.get(GRAD_NORM))
        .flatten();
    own.or(limits.metrics.get("rel")).copied()
}

fn rel(r: f64, c: f64) -> f64 {
    let d = (c - r).abs();
    if r != 0.0 {
        d / r.abs()
    } else if d == 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

fn step_list(steps: &[u64]) -> String {
    let shown: Vec<String> = steps.iter().take(10).map(u64::to_string).collect();
    let more = if steps.len() > 10 {
        format!(" and {} more", steps.len() - 10)
    } else {
        String::new()
    };
    format!("{}{more}", shown.join(", "))
}

pub fn compare_curves(
    reference: &Path,
    candidate: &Path,
    opts: &CurveOptions,
) -> Result<CurveReport, InputError> {
    let mode = opts.limits.mode.unwrap_or(CurveMode::Rel);
    let (a, b, b2) = read_all(reference, candidate, opts, mode)?;
    let mut problems: Vec<Problem> = [&a, &b]
        .into_iter()
        .chain(b2.as_ref())
        .flat_map(|c| c.problems.iter().cloned())
        .collect();
    let common = common_steps(&a, &b, &mut problems);
    let mut notes = Vec::new();
    let mut metrics = Vec::new();
    let mut points = 0;
    for name in metric_names(&a, &b, &mut notes) {
        let Some(steps) = metric_steps(name, &common, (&a, &b), &mut problems) else {
            continue;
        };
        points += steps.len();
        let gated = opts.gate_performance || !is_performance(name);
        metrics.push(metric(
            name,
            &steps,
            (&a, &b, b2.as_ref()),
            mode,
            &opts.limits,
            gated,
            (&mut problems, &mut notes),
        ));
    }
    something_gated(&metrics, &problems, (&a, &b))?;
    let counts = CurveCounts {
        steps_compared: common.len(),
        metrics_compared: metrics.len(),
        points_compared: points,
        metrics_failed: metrics
            .iter()
            .filter(|m| m.verdict == Verdict::Mismatch)
            .count(),
        structural_problems: problems.len(),
    };
    let verdict = if !problems.is_empty() || counts.metrics_failed > 0 {
        Verdict::Mismatch
    } else if metrics.iter().any(|m| m.verdict == Verdict::Investigate) {
        Verdict::Investigate
    } else {
        Verdict::Match
    };
    Ok(CurveReport {
        format_version: FORMAT_VERSION,
        kind: "curves",
        reference: reference.display().to_string(),
        candidate: candidate.display().to_string(),
        baseline2: opts.baseline2.as_ref().map(|p| p.display().to_string()),
        mode: format!("{mode:?}")
            .to_ascii_lowercase()
            .replace("noisefloor", "noise-floor"),
        limits: opts.limits.clone(),
        verdict,
        counts,
        problems,
        notes,
        metrics,
    })
}

/// The reference's, the candidate's and (where given, and the noise-floor mode needs it) the
/// second baseline's curves.
fn read_all(
    reference: &Path,
    candidate: &Path,
    opts: &CurveOptions,
    mode: CurveMode,
) -> Result<(Curve, Curve, Option<Curve>), InputError> {
    let a = read_curve_keyed(reference, &opts.step_key)?;
    let b = read_curve_keyed(candidate, &opts.step_key)?;
    let b2 = match (&opts.baseline2, mode) {
        (Some(p), _) => Some(read_curve_keyed(p, &opts.step_key)?),
        (None, CurveMode::NoiseFloor) => {
            return Err(InputError::Usage(
                "the noise-floor mode needs a second baseline run (--baseline2 FILE)".into(),
            ))
        }
        (None, _) => None,
    };
    Ok((a, b, b2))
}

/// The steps both curves hold; a step only one holds is a problem.
fn common_steps(a: &Curve, b: &Curve, problems: &mut Vec<Problem>) -> Vec<u64> {
    let only = |x: &Curve, y: &Curve| -> Vec<u64> {
        x.steps
            .keys()
            .filter(|s| !y.steps.contains_key(s))
            .copied()
            .collect()
    };
    let (missing, extra) = (only(a, b), only(b, a));
    if !missing.is_empty() {
        problems.push(Problem {
            kind: ProblemKind::MissingSteps,
            name: None,
            message: format!("the candidate lacks step(s) {}", step_list(&missing)),
        });
    }
    if !extra.is_empty() {
        problems.push(Problem {
            kind: ProblemKind::ExtraSteps,
            name: None,
            message: format!(
                "the candidate has step(s) the reference lacks: {}",
                step_list(&extra)
            ),
        });
    }
    a.steps
        .keys()
        .filter(|s| b.steps.contains_key(s))
        .copied()
        .collect()
}

/// The reference's metrics in first-seen order; the candidate's others are a note.
fn metric_names<'c>(a: &'c Curve, b: &'c Curve, notes: &mut Vec<String>) -> Vec<&'c String> {
    // Sets in first-seen order: a list searched per key was quadratic in the metrics of a line
    // (100,000 metrics took 36 s).
    let mut names: indexmap::IndexSet<&String> = indexmap::IndexSet::new();
    for values in a.steps.values() {
        names.extend(values.keys());
    }
    let mut only_candidate: indexmap::IndexSet<&String> = indexmap::IndexSet::new();
    for values in b.steps.values() {
        only_candidate.extend(values.keys().filter(|k| !names.contains(k)));
    }
    if !only_candidate.is_empty() {
        let list: Vec<String> = only_candidate.iter().map(|k| format!("`{k}`")).collect();
        notes.push(format!(
            "the candidate logs metric(s) the reference lacks, not compared: {}",
            list.join(", ")
        ));
    }
    names.into_iter().collect()
}

/// The common steps where the reference logs `name`, or `None` where the candidate lacks it at
/// one of them (a problem); a step where only the candidate logs it is a problem too.
fn metric_steps(
    name: &String,
    common: &[u64],
    (a, b): (&Curve, &Curve),
    problems: &mut Vec<Problem>,
) -> Option<Vec<u64>> {
    let steps: Vec<u64> = common
        .iter()
        .filter(|s| a.steps[*s].contains_key(name))
        .copied()
        .collect();
    let lacking: Vec<u64> = steps
        .iter()
        .filter(|s| !b.steps[*s].contains_key(name))
        .copied()
        .collect();
    if !lacking.is_empty() {
        problems.push(Problem {
            kind: ProblemKind::MissingMetric,
            name: Some(name.clone()),
            message: format!(
                "the candidate has no `{name}` at step(s) {}",
                step_list(&lacking)
            ),
        });
        return None;
    }
    // The other way round: a step the reference logged without this metric would otherwise
    // simply not be compared.
    let unreferenced: Vec<u64> = common
        .iter()
        .filter(|s| !a.steps[*s].contains_key(name) && b.steps[*s].contains_key(name))
        .copied()
        .collect();
    if !unreferenced.is_empty() {
        problems.push(Problem {
            kind: ProblemKind::MissingMetric,
            name: Some(name.clone()),
            message: format!(
                "the reference has no `{name}` at step(s) {}, which the candidate logs",
                step_list(&unreferenced)
            ),
        });
    }
    (!steps.is_empty()).then_some(steps)
}

/// Comparing nothing, or gating nothing, is an error, never a match.
fn something_gated(
    metrics: &[MetricResult],
    problems: &[Problem],
    (a, b): (&Curve, &Curve),
) -> Result<(), InputError> {
    if metrics.is_empty() {
        return Err(InputError::NothingCompared(format!(
            "no step has a metric in both curves (reference {} steps, candidate {})",
            a.steps.len(),
            b.steps.len()
        )));
    }
    if problems.is_empty() && !metrics.iter().any(|m| m.gated) {
        return Err(InputError::NothingGated(format!(
            "every metric in both curves is a performance figure ({}), and those are not gated; \
             pass --gate-performance to gate them",
            metrics
                .iter()
                .map(|m| format!("`{}`", m.name))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}
fn metric(
    name: &str,
    steps: &[u64],
    (a, b, b2): (&Curve, &Curve, Option<&Curve>),
    mode: CurveMode,
    limits: &Limits,
    gated: bool,
    (problems, notes): (&mut Vec<Problem>, &mut Vec<String>),
) -> MetricResult {
    let mut failing = Vec::new();
    let (mut worst_rel, mut worst_step, mut max_abs) = (0.0f64, None, 0.0f64);
    for &s in steps {
        let (r, c) = (a.steps[&s][name], b.steps[&s][name]);
        let q = rel(r, c);
        if worst_step.is_none() || q > worst_rel {
            worst_rel = q;
            worst_step = Some(s);
        }
        max_abs = max_abs.max((c - r).abs());
        let fails = match mode {
            CurveMode::Exact => r.to_bits() != c.to_bits(),
            CurveMode::Rel => q > rel_limit(limits, name).unwrap_or(0.0),
            CurveMode::NoiseFloor => false,
        };
        if fails {
            failing.push(s);
        }
    }
    let mean = |c: &Curve| steps.iter().map(|s| c.steps[s][name]).sum::<f64>() / steps.len() as f64;
    let mut result = MetricResult {
        name: name.to_owned(),
        gated,
        steps: steps.len(),
        failing_steps: failing,
        worst_step,
        worst_rel,
        max_abs,
        envelope: None,
        signal: None,
        ratio: None,
        reference_mean: mean(a),
        candidate_mean: mean(b),
        verdict: Verdict::Match,
    };
    if mode == CurveMode::NoiseFloor {
        if let Some(b2) = b2 {
            noise_floor(&mut result, steps, (a, b, b2), limits, (problems, notes));
        }
    } else if result.failing_steps.len() as f64 > limit(limits, "allowed_failing_steps", 0.0) {
        result.verdict = Verdict::Mismatch;
    }
    if !gated {
        result.verdict = Verdict::Match;
    }
    result
}

/// The noise-floor judgement of `result`'s metric over `steps`: the candidate's mean distance
/// from the reference against the two baselines' (their envelope), or, where the baselines are
/// bit-identical, each step's `rel` (and a note saying so).
fn noise_floor(
    result: &mut MetricResult,
    steps: &[u64],
    (a, b, b2): (&Curve, &Curve, &Curve),
    limits: &Limits,
    (problems, notes): (&mut Vec<Problem>, &mut Vec<String>),
) {
    let name = result.name.as_str();
    let both: Vec<u64> = steps
        .iter()
        .filter(|s| b2.steps.get(s).is_some_and(|v| v.contains_key(name)))
        .copied()
        .collect();
    if both.len() < steps.len() {
        problems.push(Problem {
            kind: ProblemKind::MissingMetric,
            name: Some(name.to_owned()),
            message: format!(
                "the second baseline lacks `{name}` at {} step(s)",
                steps.len() - both.len()
            ),
        });
    }
    let n = both.len().max(1) as f64;
    let envelope = both
        .iter()
        .map(|s| (a.steps[s][name] - b2.steps[s][name]).abs())
        .sum::<f64>()
        / n;
    let signal = both
        .iter()
        .map(|s| (a.steps[s][name] - b.steps[s][name]).abs())
        .sum::<f64>()
        / n;
    result.envelope = Some(envelope);
    result.signal = Some(signal);
    if envelope == 0.0 {
        // Bit-identical baselines (a deterministic program): a ratio over a zero floor
        // would fail on any round-off. Judge per step against `rel` instead, and say so.
        let rel_limit = limit(limits, "rel", ZERO_FLOOR_REL);
        result.failing_steps = steps
            .iter()
            .filter(|&&s| rel(a.steps[&s][name], b.steps[&s][name]) > rel_limit)
            .copied()
            .collect();
        notes.push(format!(
            "`{name}`: the two baseline runs are bit-identical (a deterministic program), \
             so the noise floor is zero; judged per step by rel ≤ {rel_limit:e} instead"
        ));
        if !result.failing_steps.is_empty() {
            result.verdict = Verdict::Mismatch;
        }
        return;
    }
    let ratio = signal / envelope;
    result.ratio = Some(ratio);
    result.verdict = if ratio >= limit(limits, "fail", 5.0) {
        Verdict::Mismatch
    } else if ratio >= limit(limits, "investigate", 3.0) {
        Verdict::Investigate
    } else {
        Verdict::Match
    };
}
