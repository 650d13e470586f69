//! A case as a spec: the smallest spec file that plans exactly the failing job — one model, one
//! mesh, one level, the mutation if any — so `meshparity run repro/spec.toml` reproduces it. The
//! same text validates each candidate while shrinking: a candidate the spec language refuses
//! (4 heads over tp3) is no repro.

use std::fmt::Write;

use meshparity_specs::{DType, Level, Limits};

use super::Case;

/// The model name the repro spec uses.
pub const MODEL: &str = "m";
/// The tolerance table a repro of a failed check carries: the job's own limits.
pub const TOLERANCE: &str = "repro";

/// TOML for one scalar (numbers and booleans bare, strings quoted).
fn value(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Bool(b) => Some(b.to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::String(s) => Some(format!("{s:?}")),
        _ => None,
    }
}

/// A keyword (an enum serialized as its spec word), quoted.
fn word<T: serde::Serialize>(v: T) -> Option<String> {
    value(&serde_json::to_value(v).expect("keywords serialize"))
}

/// `key = value` lines for every scalar field of `t`'s serialized form, but `skip`.
fn fields<T: serde::Serialize>(out: &mut String, t: &T, skip: &[&str]) {
    let v = serde_json::to_value(t).expect("configs serialize");
    if let serde_json::Value::Object(map) = v {
        for (k, v) in map {
            if skip.contains(&k.as_str()) {
                continue;
            }
            if let Some(v) = value(&v) {
                let _ = writeln!(out, "{k} = {v}");
            }
        }
    }
}

/// The spec of `case` judged at `level`, with `mutation` injected if given, and with
/// `tolerance`'s limits (for their dtype) as its table if given.
pub fn spec(
    case: &Case,
    mesh: &str,
    level: Level,
    mutation: Option<&str>,
    tolerance: Option<(&Limits, DType)>,
    engine: Option<&str>,
) -> String {
    let mut out = String::from(
        "# The smallest configuration meshparity found that still fails the same way\n\
         # (`meshparity run --shrink`). Run it with the command in `command`.\n\n[run]\n",
    );
    run_table(&mut out, case);
    if let Some(table) = engine {
        let _ = writeln!(out, "\n{table}");
    }
    let _ = writeln!(out, "\n[models.{MODEL}]");
    fields(&mut out, &case.model, &["engine"]);
    if let Some(name) = &case.model.engine {
        let _ = writeln!(out, "engine = {name:?}");
    }
    // A command model's own keys, as written: numbers and booleans bare.
    for (k, v) in &case.model.params {
        let bare = v.parse::<f64>().is_ok() || v == "true" || v == "false";
        if bare {
            let _ = writeln!(out, "{k} = {v}");
        } else {
            let _ = writeln!(out, "{k} = {v:?}");
        }
    }
    let _ = writeln!(out, "\n[meshes.{mesh}]");
    fields(&mut out, &case.mesh, &[]);
    if let Some((limits, dtype)) = tolerance {
        let _ = writeln!(
            out,
            "\n[tolerances.{TOLERANCE}]\n{}",
            table_entry(limits, level, dtype)
        );
    }
    let _ = writeln!(
        out,
        "\n[[matrix]]\nmodels = [\"{MODEL}\"]\nmeshes = [\"{mesh}\"]\nlevels = [\"{level}\"]"
    );
    if tolerance.is_some() {
        let _ = writeln!(out, "tolerance = \"{TOLERANCE}\"");
    }
    if let Some(m) = mutation {
        let _ = writeln!(out, "\n[mutations]\nselect = [\"{m}\"]");
    }
    out
}

/// `[run]`'s keys of `case` (the table's header already written), from the keys' one table.
fn run_table(out: &mut String, case: &Case) {
    let job = meshparity_specs::run::keys::Job {
        training: &case.training,
        dtype: case.dtype,
    };
    let table = meshparity_specs::run::keys::table("repro", job);
    out.push_str(&toml::to_string(&table).expect("scalars serialize"));
}

/// `level.dtype = { metric = limit, … }` (or `level = "exact"`) for a tolerance table.
fn table_entry(limits: &Limits, level: Level, dtype: DType) -> String {
    if limits.exact {
        return format!("{level} = \"exact\"");
    }
    let mut items: Vec<String> = limits
        .metrics
        .iter()
        .map(|(k, v)| format!("{k} = {v:e}"))
        .collect();
    if let Some(m) = limits.mode {
        items.push(format!("mode = {}", word(m).unwrap_or_default()));
    }
    if let Some(a) = limits.layer_average {
        items.push(format!("layer_average = {a}"));
    }
    format!("{level}.{dtype} = {{ {} }}", items.join(", "))
}
