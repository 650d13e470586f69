//! Curve comparison: each mode, the failing-steps budget, structural problems, performance
//! metrics and malformed lines.

use std::path::{Path, PathBuf};

use meshparity_compare::report::ProblemKind;
use meshparity_compare::{compare_curves, CurveOptions, InputError, Verdict};
use meshparity_specs::{CurveMode, Limits};

fn curve(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

fn losses(values: &[f64]) -> Vec<String> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                r#"{{"step": {}, "loss": {v:?}, "step_time_s": {}, "phase": "train"}}"#,
                i + 1,
                0.1 * (i + 1) as f64
            )
        })
        .collect()
}

fn limits(mode: CurveMode, metrics: &[(&'static str, f64)]) -> Limits {
    Limits {
        mode: Some(mode),
        metrics: metrics.iter().copied().collect(),
        ..Limits::default()
    }
}

fn opts(limits: Limits) -> CurveOptions {
    CurveOptions {
        step_key: "step".into(),
        limits,
        baseline2: None,
        gate_performance: false,
    }
}

const BASE: [f64; 5] = [3.0, 2.5, 2.0, 1.5, 1.0];

#[test]
fn exact_mode_needs_identical_bits() {
    let d = tempfile::tempdir().unwrap();
    let a = curve(d.path(), "a.jsonl", &losses(&BASE));
    let same = curve(d.path(), "same.jsonl", &losses(&BASE));
    let off = curve(
        d.path(),
        "off.jsonl",
        &losses(&[3.0, 2.5, 2.0 + 1e-15, 1.5, 1.0]),
    );
    let r = compare_curves(&a, &same, &opts(limits(CurveMode::Exact, &[]))).unwrap();
    assert_eq!(r.verdict, Verdict::Match);
    assert_eq!((r.counts.steps_compared, r.counts.points_compared), (5, 10));
    let r = compare_curves(&a, &off, &opts(limits(CurveMode::Exact, &[]))).unwrap();
    assert_eq!(r.verdict, Verdict::Mismatch);
    assert_eq!(r.metrics[0].failing_steps, [3]);
}

#[test]
fn rel_mode_with_a_failing_steps_budget() {
    let d = tempfile::tempdir().unwrap();
    let a = curve(d.path(), "a.jsonl", &losses(&BASE));
    // Step 2 off by 1% (rel 0.01), step 4 by 2% (rel 0.02).
    let b = curve(d.path(), "b.jsonl", &losses(&[3.0, 2.525, 2.0, 1.53, 1.0]));
    let strict = compare_curves(
        &a,
        &b,
        &opts(limits(
            CurveMode::Rel,
            &[("rel", 0.005), ("allowed_failing_steps", 1.0)],
        )),
    )
    .unwrap();
    assert_eq!(strict.verdict, Verdict::Mismatch);
    assert_eq!(strict.metrics[0].failing_steps, [2, 4]);
    assert_eq!(strict.metrics[0].worst_step, Some(4));
    assert!((strict.metrics[0].worst_rel - 0.02).abs() < 1e-12);
    let budget = compare_curves(
        &a,
        &b,
        &opts(limits(
            CurveMode::Rel,
            &[("rel", 0.015), ("allowed_failing_steps", 1.0)],
        )),
    )
    .unwrap();
    assert_eq!(
        budget.verdict,
        Verdict::Match,
        "one failing step is within the budget"
    );
    assert_eq!(budget.metrics[0].failing_steps, [4]);
}

#[test]
fn noise_floor_mode_by_hand() {
    let d = tempfile::tempdir().unwrap();
    let a = curve(d.path(), "a.jsonl", &losses(&BASE));
    // Second baseline differs by 0.01 at every step: envelope = 0.01.
    let b2 = curve(d.path(), "b2.jsonl", &losses(&BASE.map(|x| x + 0.01)));
    let run = |signal: f64| {
        let c = curve(d.path(), "c.jsonl", &losses(&BASE.map(|x| x - signal)));
        let o = CurveOptions {
            step_key: "step".into(),
            baseline2: Some(b2.clone()),
            ..opts(limits(
                CurveMode::NoiseFloor,
                &[("investigate", 3.0), ("fail", 5.0)],
            ))
        };
        compare_curves(&a, &c, &o).unwrap()
    };
    let pass = run(0.02);
    let m = &pass.metrics[0];
    assert!((m.envelope.unwrap() - 0.01).abs() < 1e-12);
    assert!((m.ratio.unwrap() - 2.0).abs() < 1e-9);
    assert_eq!(pass.verdict, Verdict::Match);
    assert_eq!(run(0.04).verdict, Verdict::Investigate);
    assert_eq!(run(0.06).verdict, Verdict::Mismatch);
    let err = compare_curves(&a, &a, &opts(limits(CurveMode::NoiseFloor, &[]))).unwrap_err();
    assert!(err.to_string().contains("--baseline2"));
}

#[test]
fn performance_metrics_are_reported_not_gated_unless_asked() {
    let d = tempfile::tempdir().unwrap();
    let a = curve(d.path(), "a.jsonl", &losses(&BASE));
    let slow: Vec<String> = losses(&BASE)
        .iter()
        .map(|l| l.replace("\"step_time_s\": 0.", "\"step_time_s\": 9."))
        .collect();
    let b = curve(d.path(), "b.jsonl", &slow);
    let r = compare_curves(&a, &b, &opts(limits(CurveMode::Rel, &[("rel", 1e-9)]))).unwrap();
    assert_eq!(r.verdict, Verdict::Match);
    let t = r.metrics.iter().find(|m| m.name == "step_time_s").unwrap();
    assert!(!t.gated && t.worst_rel > 1.0, "reported with its numbers");
    let gated = CurveOptions {
        step_key: "step".into(),
        gate_performance: true,
        ..opts(limits(CurveMode::Rel, &[("rel", 1e-9)]))
    };
    assert_eq!(
        compare_curves(&a, &b, &gated).unwrap().verdict,
        Verdict::Mismatch
    );
}

#[test]
fn structural_problems_in_curves() {
    let d = tempfile::tempdir().unwrap();
    let a = curve(d.path(), "a.jsonl", &losses(&BASE));
    let mut lines = losses(&BASE);
    lines.remove(4); // step 5 missing
    lines.push(lines[0].clone()); // step 1 twice
    lines.push(r#"{"step": 9, "loss": 1.0}"#.into()); // extra step
    lines[2] = r#"{"step": 3, "loss": NaN, "step_time_s": 0.3}"#.into(); // Python's bare NaN
    lines[3] = r#"{"step": 4, "step_time_s": 0.4}"#.into(); // loss missing
    let b = curve(d.path(), "b.jsonl", &lines);
    let r = compare_curves(&a, &b, &opts(limits(CurveMode::Rel, &[("rel", 1e-6)]))).unwrap();
    let kinds: Vec<ProblemKind> = r.problems.iter().map(|p| p.kind).collect();
    for k in [
        ProblemKind::NonFinite,
        ProblemKind::DuplicateStep,
        ProblemKind::MissingSteps,
        ProblemKind::ExtraSteps,
        ProblemKind::MissingMetric,
    ] {
        assert!(kinds.contains(&k), "{k:?} not in {kinds:?}");
    }
    assert_eq!(r.verdict, Verdict::Mismatch);
    let messages: Vec<&str> = r.problems.iter().map(|p| p.message.as_str()).collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("`loss` is NaN at step 3 (line 3)")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("step 1 appears on lines 1 and 5")),
        "{messages:?}"
    );
}

#[test]
fn malformed_lines_and_empty_comparisons_are_errors() {
    let d = tempfile::tempdir().unwrap();
    let a = curve(d.path(), "a.jsonl", &losses(&BASE));
    let bad = curve(
        d.path(),
        "bad.jsonl",
        &[losses(&BASE)[0].clone(), "{\"step\": 2, \"loss\": ".into()],
    );
    let err = compare_curves(&a, &bad, &opts(limits(CurveMode::Rel, &[]))).unwrap_err();
    assert!(matches!(err, InputError::Curve { line: 2, .. }), "{err}");
    assert!(
        err.to_string().contains("bad.jsonl` line 2: not JSON"),
        "{err}"
    );
    let nostep = curve(d.path(), "nostep.jsonl", &[r#"{"loss": 1.0}"#.into()]);
    let err = compare_curves(&a, &nostep, &opts(limits(CurveMode::Rel, &[]))).unwrap_err();
    assert!(err.to_string().contains("no `step` key"), "{err}");
    let disjoint = curve(
        d.path(),
        "disjoint.jsonl",
        &[r#"{"step": 100, "loss": 1.0}"#.into()],
    );
    let err = compare_curves(&a, &disjoint, &opts(limits(CurveMode::Rel, &[]))).unwrap_err();
    assert!(matches!(err, InputError::NothingCompared(_)), "{err}");
}

/// A reference whose loss is a string, null or missing at a step never matches: that step
/// would otherwise go unchecked.
#[test]
fn a_reference_loss_that_is_not_a_number_is_a_problem_not_a_skipped_step() {
    let d = tempfile::tempdir().unwrap();
    let good = curve(d.path(), "good.jsonl", &losses(&BASE));
    for (case, bad_line) in [
        ("string", r#"{"step": 2, "loss": "4.7", "phase": "train"}"#),
        ("null", r#"{"step": 2, "loss": null, "phase": "train"}"#),
        (
            "missing",
            r#"{"step": 2, "step_time_s": 0.2, "phase": "train"}"#,
        ),
    ] {
        let mut lines = losses(&BASE);
        lines[1] = bad_line.into();
        let reference = curve(d.path(), &format!("{case}.jsonl"), &lines);
        let r = compare_curves(
            &reference,
            &good,
            &opts(limits(CurveMode::Rel, &[("rel", 1e-6)])),
        )
        .unwrap();
        assert_eq!(r.verdict, Verdict::Mismatch, "{case}");
        let messages: Vec<&str> = r.problems.iter().map(|p| p.message.as_str()).collect();
        assert!(
            messages
                .iter()
                .any(|m| m.contains("`loss`") && m.contains('2')),
            "{case}: {messages:?}"
        );
    }
    // Labels stay labels.
    let r = compare_curves(
        &good,
        &good,
        &opts(limits(CurveMode::Rel, &[("rel", 1e-6)])),
    )
    .unwrap();
    assert_eq!(r.verdict, Verdict::Match);
}
