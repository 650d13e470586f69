//! Reports as text for a terminal or a CI log: structural problems first, then the worst
//! offenders, then one verdict line with the counts of what was compared.

use std::fmt::Write;

use crate::report::{CurveReport, TensorReport, TensorResult, Verdict};

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Match => "MATCH",
        Verdict::Investigate => "INVESTIGATE",
        Verdict::Mismatch => "MISMATCH",
    }
}

pub fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if !x.is_finite() {
        x.to_string()
    } else {
        format!("{x:.3e}")
    }
}

/// The distinct sets of limits in force, once each: `allclose(atol=1e-5, rtol=1.3e-6)` or
/// `relative_l2 ≤ 1e-4 (layer-averaged)`. The set most tensors have is named alone; each other
/// set (a per-tensor override, the gradient norm's own limit) says which tensors it is for.
fn gates_in_force(report: &TensorReport) -> String {
    let mut sets: Vec<(String, Vec<&str>)> = Vec::new();
    for t in &report.tensors {
        let l = &t.limits;
        let mut parts = Vec::new();
        if l.exact {
            parts.push("bit-exact".to_owned());
        }
        for (metric, limit) in &l.gates {
            parts.push(match metric.as_str() {
                "allclose" => format!("allclose(atol={}, rtol={})", sci(l.atol), sci(l.rtol)),
                m => {
                    let op = if crate::tolerance::is_minimum(m) {
                        "≥"
                    } else {
                        "≤"
                    };
                    format!("{m} {op} {}", sci(*limit))
                }
            });
        }
        let mut set = if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(", ")
        };
        if l.layer_average {
            set.push_str(" (layer-averaged)");
        }
        if let Some(g) = &l.override_glob {
            set.push_str(&format!(" [override {g}]"));
        }
        match sets.iter_mut().find(|(s, _)| *s == set) {
            Some((_, names)) => names.push(&t.name),
            None => sets.push((set, vec![&t.name])),
        }
    }
    sets.sort_by_key(|(_, names)| std::cmp::Reverse(names.len()));
    sets.iter()
        .enumerate()
        .map(|(i, (set, names))| {
            if i == 0 {
                return set.clone();
            }
            let mut shown: Vec<String> = names.iter().take(3).map(|n| format!("`{n}`")).collect();
            if names.len() > 3 {
                shown.push(format!("{} more", names.len() - 3));
            }
            format!("{set} for {}", shown.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// How far past its worst limit a tensor is (for ordering offenders).
fn badness(r: &TensorResult) -> f64 {
    r.failures
        .iter()
        .map(|f| match f.bound {
            "min" => (1.0 - f.value) / (1.0 - f.limit).max(1e-300),
            _ => f.value / f.limit.max(1e-300),
        })
        .fold(0.0, f64::max)
}

pub fn tensors(report: &TensorReport, worst: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "reference: {}\ncandidate: {}\nprofile:   {}\ngates:     {}",
        report.reference,
        report.candidate,
        report.profile,
        gates_in_force(report)
    );
    if !report.problems.is_empty() {
        let _ = writeln!(out, "\nstructural problems (fatal):");
        for p in &report.problems {
            let _ = writeln!(out, "  {}", p.message);
        }
    }
    let mut order: Vec<&TensorResult> = report.tensors.iter().collect();
    order.sort_by(|a, b| {
        a.passed
            .cmp(&b.passed)
            .then(badness(b).total_cmp(&badness(a)))
            .then(b.metrics.relative_l2.total_cmp(&a.metrics.relative_l2))
            .then(b.metrics.max_abs.total_cmp(&a.metrics.max_abs))
    });
    let hidden: Vec<&TensorResult> = order.iter().skip(worst).copied().collect();
    let shown: Vec<&TensorResult> = order.into_iter().take(worst).collect();
    let structural: Vec<&str> = report
        .problems
        .iter()
        .filter_map(|p| p.name.as_deref())
        .collect();
    worst_first(&mut out, &shown, &structural);
    if !report.tensors.is_empty() {
        let _ = writeln!(
            out,
            "  (MAX_REL_ELEM: the largest |c − r| / |r| of one element, not max|c − r| / max|r|)"
        );
    }
    if !hidden.is_empty() {
        let failing = hidden.iter().filter(|r| !r.passed).count();
        let _ = writeln!(
            out,
            "  ... and {} more tensor(s) not shown ({failing} of them failing); --worst {} shows all",
            hidden.len(),
            report.tensors.len()
        );
    }
    for n in &report.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let c = &report.counts;
    let _ = writeln!(
        out,
        "\n{}: {} of {} tensors fail, {} structural problem(s) (compared {} tensors, {} elements)",
        verdict_word(report.verdict),
        c.tensors_failed,
        c.tensors_compared,
        c.structural_problems,
        c.tensors_compared,
        c.elements_compared
    );
    out
}

/// The tensors shown, worst first, a row each (and a failing one's worst element).
fn worst_first(out: &mut String, shown: &[&TensorResult], structural: &[&str]) {
    if shown.is_empty() {
        return;
    }
    let w = shown.iter().map(|r| r.name.len()).max().unwrap_or(6).max(6);
    let _ = writeln!(out, "\n{} tensors, worst first:", shown.len());
    let _ = writeln!(
        out,
        "  {:<w$}  {:<5} {:>10} {:>12} {:>10} {:>12} {:>12}  STATUS",
        "TENSOR", "DTYPE", "MAX_ABS", "MAX_REL_ELEM", "REL_L2", "COSINE", "ALLCLOSE"
    );
    for r in shown {
        let m = &r.metrics;
        let status = status(r, structural.contains(&r.name.as_str()));
        let _ = writeln!(
            out,
            "  {:<w$}  {:<5} {:>10} {:>12} {:>10} {:>12.9} {:>12}  {status}",
            r.name,
            r.dtype,
            sci(m.max_abs),
            sci(m.max_rel),
            sci(m.relative_l2),
            m.cosine,
            format!("{}/{}", m.allclose.mismatched, m.elements),
        );
        if !r.passed {
            if let Some(i) = &m.max_abs_index {
                let _ = writeln!(out, "  {:<w$}  worst element at {i:?}", "");
            }
        }
    }
}

/// A tensor's status column: ok (bit-exact or not), or each failure with its limit.
fn status(r: &TensorResult, structural: bool) -> String {
    let m = &r.metrics;
    if structural {
        return "FAIL (structural problem above)".to_owned();
    }
    if r.passed {
        return if m.bit_exact { "ok (bit-exact)" } else { "ok" }.to_owned();
    }
    let f: Vec<String> = r
        .failures
        .iter()
        .map(|f| match f.metric.as_str() {
            "allclose" => format!(
                "allclose: {} element(s) outside atol={} + rtol={}·|ref|",
                f.value,
                sci(r.limits.atol),
                sci(r.limits.rtol)
            ),
            "bit_exact" => format!("not bit-exact: {} element(s) differ", f.value),
            _ => {
                let layer = f
                    .layer
                    .map_or(String::new(), |l| format!("layer {l} mean "));
                let op = if f.bound == "min" { "<" } else { ">" };
                format!("{layer}{} {} {op} {}", f.metric, sci(f.value), sci(f.limit))
            }
        })
        .collect();
    format!("FAIL {}", f.join("; "))
}

pub fn curves(report: &CurveReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "reference: {}\ncandidate: {}",
        report.reference, report.candidate
    );
    if let Some(b2) = &report.baseline2 {
        let _ = writeln!(out, "baseline2: {b2}");
    }
    let _ = writeln!(out, "mode:      {}", report.mode);
    let _ = writeln!(out, "gates:     {}", curve_gates(report));
    if !report.problems.is_empty() {
        let _ = writeln!(out, "\nstructural problems (fatal):");
        for p in &report.problems {
            let _ = writeln!(out, "  {}", p.message);
        }
    }
    let w = report
        .metrics
        .iter()
        .map(|m| m.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let _ = writeln!(
        out,
        "\n  {:<w$} {:>6} {:>12} {:>11} {:>10}  STATUS",
        "METRIC", "STEPS", "WORST_REL", "AT_STEP", "RATIO"
    );
    for m in &report.metrics {
        // The metric's own limit: the gradient norm's where the table has one.
        let rel = crate::curve::rel_limit(&report.limits, &m.name);
        let status = match (m.gated, m.verdict) {
            (false, _) => "reported (performance, not gated)".to_owned(),
            (true, Verdict::Match) => "ok".to_owned(),
            (true, Verdict::Investigate) => "INVESTIGATE".to_owned(),
            (true, Verdict::Mismatch) if m.ratio.is_some() => "FAIL noise-floor ratio".to_owned(),
            (true, Verdict::Mismatch) => format!(
                "FAIL at step(s) {:?}",
                &m.failing_steps[..m.failing_steps.len().min(10)]
            ),
        };
        let _ = writeln!(
            out,
            "  {:<w$} {:>6} {:>12} {:>11} {:>10}  {status}",
            m.name,
            m.steps,
            sci(m.worst_rel),
            m.worst_step.map_or("-".into(), |s| s.to_string()),
            match (m.ratio, rel) {
                (Some(r), _) => format!("{r:.2}"),
                // In rel mode: the worst step in units of the limit (above 1 fails).
                (None, Some(l)) if m.gated && l > 0.0 => format!("{:.2}×", m.worst_rel / l),
                _ => "-".into(),
            },
        );
    }
    for n in &report.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let c = &report.counts;
    let _ = writeln!(
        out,
        "\n{}: {} of {} metrics fail, {} structural problem(s) (compared {} steps, {} points)",
        verdict_word(report.verdict),
        c.metrics_failed,
        c.metrics_compared,
        c.structural_problems,
        c.steps_compared,
        c.points_compared
    );
    out
}

/// The limits a curve comparison had in force, in words.
fn curve_gates(report: &CurveReport) -> String {
    let get = |k: &str| report.limits.metrics.get(k).copied();
    match report.mode.as_str() {
        "exact" => "every step bit-identical".to_owned(),
        "noise-floor" => format!(
            "signal / run-to-run envelope: < {} passes, ≥ {} fails",
            sci(get("investigate").unwrap_or(3.0)),
            sci(get("fail").unwrap_or(5.0))
        ),
        _ => match get("rel") {
            Some(rel) => {
                let own = get(meshparity_specs::tolerance::GRAD_NORM)
                    .map(|g| format!(" ({} ≤ {})", meshparity_specs::tolerance::GRAD_NORM, sci(g)))
                    .unwrap_or_default();
                format!(
                    "|b − f| / |b| ≤ {}{own} per step, {} failing step(s) allowed",
                    sci(rel),
                    get("allowed_failing_steps").unwrap_or(0.0)
                )
            }
            None => "none in force".to_owned(),
        },
    }
}
