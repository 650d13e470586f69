//! Reading a curve file: one JSON object per line, steps numbered by a key, metrics that are
//! numbers (a number written as a string, or null, is a problem, not a label to skip).

use std::collections::BTreeMap;
use std::path::Path;

use indexmap::IndexMap;

use super::Curve;
use crate::error::InputError;
use crate::report::{Problem, ProblemKind};

/// Python's json module writes NaN / Infinity bare; accept them so a diverged loss is reported
/// as a NaN loss instead of a parse error.
fn parse_line(line: &str) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::from_str(line).or_else(|e| {
        let patched = line
            .replace("-Infinity", "\"-inf\"")
            .replace("Infinity", "\"inf\"")
            .replace("NaN", "\"nan\"");
        serde_json::from_str(&patched).map_err(|_| e)
    })
}

pub fn read_curve(path: &Path) -> Result<Curve, InputError> {
    read_curve_keyed(path, "step")
}

/// Read a curve whose steps are numbered by `step_key`.
pub fn read_curve_keyed(path: &Path, step_key: &str) -> Result<Curve, InputError> {
    let text = meshparity_files::read_to_string(path, meshparity_files::Limit::CURVE)
        .map_err(|e| InputError::io(path, e))?;
    let mut curve = Curve {
        path: path.to_owned(),
        steps: BTreeMap::new(),
        lines: BTreeMap::new(),
        problems: Vec::new(),
    };
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |reason: String| InputError::Curve {
            path: path.to_owned(),
            line: lineno,
            reason,
        };
        let v = parse_line(line).map_err(|e| bad(format!("not JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad("expected a JSON object per line".into()))?;
        let step = obj
            .get(step_key)
            .ok_or_else(|| {
                bad(format!(
                    "no `{step_key}` key (name the step key with --step-key)"
                ))
            })?
            .as_u64()
            .ok_or_else(|| bad(format!("`{step_key}` must be a non-negative integer")))?;
        let values = metrics(obj, step_key, (path, step, lineno), &mut curve.problems);
        if let Some((&last, &at)) = curve.lines.iter().next_back().filter(|(l, _)| **l > step) {
            if !curve.lines.contains_key(&step) {
                curve.problems.push(Problem {
                    kind: ProblemKind::OutOfOrder,
                    name: None,
                    message: format!(
                        "{}: step {step} (line {lineno}) comes after step {last} (line {at}); \
                         steps must increase",
                        path.display()
                    ),
                });
            }
        }
        if let Some(prev) = curve.lines.get(&step) {
            curve.problems.push(Problem {
                kind: ProblemKind::DuplicateStep,
                name: None,
                message: format!(
                    "{}: step {step} appears on lines {prev} and {lineno}",
                    path.display()
                ),
            });
            continue;
        }
        curve.lines.insert(step, lineno);
        curve.steps.insert(step, values);
    }
    Ok(curve)
}

/// A line's metrics (every key but the step's): numbers, and `"nan"`/`"inf"` strings; a
/// number written as a string or a null is a problem, a non-finite value one too (kept); other
/// values are labels, not metrics.
fn metrics(
    obj: &serde_json::Map<String, serde_json::Value>,
    step_key: &str,
    (path, step, lineno): (&Path, u64, usize),
    problems: &mut Vec<Problem>,
) -> IndexMap<String, f64> {
    let mut values = IndexMap::new();
    for (k, v) in obj {
        if k == step_key {
            continue;
        }
        let x = match v {
            serde_json::Value::Number(n) => n.as_f64(),
            serde_json::Value::String(s) if matches!(s.as_str(), "nan" | "inf" | "-inf") => {
                s.parse().ok()
            }
            // A number written as a string, or no value at all, is a metric the writer got
            // wrong; skipping it like a label would leave that step unchecked.
            serde_json::Value::String(s) if s.trim().parse::<f64>().is_ok() => {
                problems.push(not_numeric(
                    path,
                    k,
                    step,
                    lineno,
                    &format!("the string {v}"),
                ));
                None
            }
            serde_json::Value::Null => {
                problems.push(not_numeric(path, k, step, lineno, "null"));
                None
            }
            _ => None, // labels such as "phase": "train" are not metrics
        };
        if let Some(x) = x {
            if !x.is_finite() {
                problems.push(Problem {
                    kind: ProblemKind::NonFinite,
                    name: Some(k.clone()),
                    message: format!(
                        "{}: `{k}` is {x} at step {step} (line {lineno})",
                        path.display()
                    ),
                });
            }
            values.insert(k.clone(), x);
        }
    }
    values
}

fn not_numeric(path: &Path, key: &str, step: u64, line: usize, what: &str) -> Problem {
    Problem {
        kind: ProblemKind::NotNumeric,
        name: Some(key.to_owned()),
        message: format!(
            "{}: `{key}` is {what} at step {step} (line {line}); metrics must be JSON numbers",
            path.display()
        ),
    }
}
