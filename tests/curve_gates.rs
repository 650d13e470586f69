//! Curve metrics a command engine's program logs, gated by name (issue 35): `grad_norm` beside
//! the loss whenever the program logs it, with its own limit; any metric `artifacts.gate`
//! lists; every other metric that is no performance figure left out and said in the reports'
//! notes, never dropped silently.
//!
//! The program is a shell line: its loss is the same on every mesh, its gradient norm and
//! learning rate are the world size (so they differ from world size 1 on dp2), as a norm
//! summed over the wrong ranks would.

#[macro_use]
mod common;

use common::harness::{engine_spec, fixture, meshparity, results};

/// A program logging `loss`, `grad_norm` and `lr` (those two ×world size) and a step time;
/// `gate` is added to its artifact table.
fn spec(norm: bool, gate: &str) -> String {
    let norm = if norm {
        r#", \"grad_norm\": {{world_size}}"#
    } else {
        ""
    };
    let line = String::from(r#"for s in 1 2; do echo "{\"step\": $s, \"loss\": 2.$s"#)
        + norm
        + r#", \"lr\": {{world_size}}, \"step_time_s\": 0.$s}"; done > m.jsonl"#;
    let engine = String::from("program = \"sh\"\nargs = ['-c', '")
        + &line
        + "']\ncwd = \"{{out_dir}}\"\nartifacts = { curve = \"m.jsonl\""
        + gate
        + " }";
    engine_spec(&engine, "", r#"["curve"]"#)
}

fn run(spec: &str) -> (Option<i32>, serde_json::Value, String) {
    let fx = fixture(spec);
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .output()
        .unwrap();
    let run = fx.path().join("run");
    let r = results(&run);
    let summary = std::fs::read_to_string(run.join("summary.md")).unwrap_or_default();
    (out.status.code(), r, summary)
}

fn curve_job(r: &serde_json::Value) -> &serde_json::Value {
    r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"].as_str().unwrap().ends_with("/curve"))
        .unwrap()
}

/// The gradient norm differs on dp2: gated by default, the level fails on it.
#[test]
fn a_logged_gradient_norm_is_gated_by_default() {
    let (code, r, _) = run(&spec(true, ""));
    let job = curve_job(&r);
    assert_eq!(code, Some(1), "{job:#}");
    assert_eq!(job["status"], "failed", "{job:#}");
    let text = job.to_string();
    assert!(text.contains("`grad_norm` rel"), "{text}");
    assert!(!text.contains("vacuous"), "{text}");
}

/// Without a gradient norm, the loss matches; `lr` differs but is not gated: the level passes
/// and the reports say `lr` was not compared.
#[test]
fn a_metric_neither_gated_nor_performance_is_said_not_dropped() {
    let (code, r, summary) = run(&spec(false, ""));
    let job = curve_job(&r);
    assert_eq!(code, Some(0), "{job:#}");
    assert_eq!(job["status"], "passed", "{job:#}");
    assert!(job.to_string().contains("not compared: `lr`"), "{job:#}");
    assert!(
        summary.contains("### Notes") && summary.contains("`lr`"),
        "{summary}"
    );
}

/// Listed in `artifacts.gate`, `lr` is gated like the loss and fails.
#[test]
fn a_listed_metric_is_gated() {
    let (code, r, _) = run(&spec(false, r#", gate = ["lr"]"#));
    let job = curve_job(&r);
    assert_eq!(code, Some(1), "{job:#}");
    assert!(job.to_string().contains("`lr` rel"), "{job:#}");
    assert!(!job.to_string().contains("vacuous"), "{job:#}");
}

/// What `gate` may not name is refused at its line; a name the program never logs is a job
/// error that lists what it does log.
#[test]
fn gate_names_are_checked() {
    for (gate, says) in [
        (r#"["step"]"#, "numbers the steps"),
        (r#"["loss"]"#, "gated anyway"),
        (r#"["step_time_s"]"#, "performance figure"),
        (r#"["lr", "lr"]"#, "listed twice"),
    ] {
        let fx = fixture(&spec(false, &format!(", gate = {gate}")));
        let out = meshparity(fx.path())
            .args(["validate", "spec.toml"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{gate}: {err}");
        assert!(
            err.contains("spec.toml:") && err.contains(says),
            "{gate}: {err}"
        );
    }
    let (code, r, _) = run(&spec(false, r#", gate = ["lm_loss_mtp"]"#));
    assert_eq!(code, Some(3), "{r:#}");
    let text = r.to_string();
    assert!(
        text.contains("no step has `lm_loss_mtp`") && text.contains("metrics: loss, lr"),
        "{text}"
    );
}
