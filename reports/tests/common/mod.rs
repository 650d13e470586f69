//! A fixed result set covering every status, and helpers to find the external checkers
//! (xmllint, Python junitparser, Chromium). `.ci/run` installs them; without them a test says
//! so and passes, but under CI (`CI` set) a missing checker is a failure.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use meshparity_judge::Finding;
use meshparity_reports::{Attempt, JobRecord, RunMeta, RunResults, Status, FORMAT_VERSION};
use serde_json::json;

pub fn available(cmd: &str, args: &[&str], install: &str) -> bool {
    let ok = Command::new(cmd)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run this check: {install} (see .ci/run)"
        );
        eprintln!("SKIPPED: `{cmd}` not usable here; {install} to run this check");
    }
    ok
}

fn job(name: &str, status: Status, summary: &str) -> JobRecord {
    let parts: Vec<&str> = name.split('/').collect();
    let (mesh, tail) = if parts.len() == 3 {
        (Some(parts[1].to_owned()), parts[2])
    } else {
        (None, parts[1])
    };
    let (kind, level, mutation) = if let Some(m) = tail.strip_prefix("mutation[") {
        (
            "mutation".to_owned(),
            None,
            Some(m.trim_end_matches(']').to_owned()),
        )
    } else if tail == "reference" {
        ("reference".to_owned(), None, None)
    } else {
        (tail.to_owned(), Some(tail.to_owned()), None)
    };
    let (model, dtype) = parts[0].split_once('@').unwrap();
    JobRecord {
        id: format!(
            "{:016x}",
            name.bytes()
                .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
        ),
        name: name.to_owned(),
        kind,
        model: model.to_owned(),
        mesh,
        level,
        mutation,
        dtype: dtype.to_owned(),
        device: "cpu".to_owned(),
        adapter: "cpu".to_owned(),
        world_size: 2,
        status,
        summary: summary.to_owned(),
        seconds: 0.25,
        attempts: vec![Attempt {
            status,
            seconds: 0.25,
            exit: Some("0".into()),
            log_tail: String::new(),
            dir: None,
        }],
        needs: Vec::new(),
        cached: false,
        dependency: false,
        reproduce: format!("meshparity run spec.toml --filter 'name={name}'"),
        detail: None,
        fingerprint: String::new(),
        shrink_seconds: 0.0,
    }
}

/// A level job's findings from the fields a test cares about; the rest as a passing run has
/// them (no gates where none are given, no faults).
fn level(level: &str, mut v: serde_json::Value) -> Option<Finding> {
    let passed = v["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["passed"] == true);
    for c in v["comparisons"].as_array_mut().unwrap() {
        c["gates"] = json!([]);
    }
    v["level"] = json!(level);
    v["passed"] = json!(passed);
    v["altered"] = json!([]);
    v["anomalies"] = json!([]);
    v["seconds"] = json!(0.25);
    finding(v)
}

fn finding(v: serde_json::Value) -> Option<Finding> {
    let f: Finding = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
    Some(f)
}

fn tensor(name: &str, relative_l2: f64, passed: bool) -> serde_json::Value {
    json!({
        "name": name, "dtype": "F32", "shape": [64, 64], "passed": passed,
        "metrics": { "elements": 4096, "max_abs": relative_l2 * 3.0, "max_rel": relative_l2 * 10.0, "relative_l2": relative_l2,
                     "cosine": 1.0 - relative_l2, "allclose": { "mismatched": if passed { 0 } else { 17 } } },
        "failures": []
    })
}

/// One of everything: passed, failed with tensors, a curve, crash, timeout, skipped, not run,
/// flaky, caught and uncaught mutations. `hostile` puts markup, ANSI escapes, control
/// characters and `]]>` into every text a job can carry.
pub fn results(hostile: bool) -> RunResults {
    let evil = if hostile {
        " <script>alert('x')</script> \u{1b}[31mred\u{1b}[0m \u{7}bell ]]> &amp; <img src=x onerror=alert(1)>"
    } else {
        ""
    };
    let mut jobs = Vec::new();
    jobs.push(job(
        "tiny@f32/reference",
        Status::Passed,
        "oracle artifacts written (4 steps)",
    ));
    let mut rt = job(
        "tiny@f32/tp2/roundtrip",
        Status::Passed,
        "checkpoint match (21 compared)",
    );
    rt.detail = level(
        "roundtrip",
        json!({ "comparisons": [{ "what": "checkpoint", "passed": true, "compared": 21, "reference": "seed.safetensors", "candidate": "merged.safetensors", "report": { "tensors": [tensor("embed.weight", 0.0, true)] } }], "collectives": 0 }),
    );
    jobs.push(rt);
    let mut curve = job(
        "tiny@f32/tp2/curve",
        Status::Passed,
        "losses match (4 compared)",
    );
    curve.detail = level(
        "curve",
        json!({ "comparisons": [{ "what": "losses", "passed": true, "compared": 4, "reference": "a", "candidate": "b", "report": { "metrics": [
                    { "name": "loss", "gated": true, "reference_mean": 4.55, "candidate_mean": 4.55 },
                    { "name": format!("step_time_s{evil}"), "gated": false, "reference_mean": 0.25, "candidate_mean": 0.3 } ] } }],
                           "losses": { "reference": [4.9, 4.7, 4.4, 4.2], "candidate": [4.9, 4.7, 4.4, 4.2] }, "collectives": 120 }),
    );
    jobs.push(curve);
    let mut oracle = job("tiny@f32/tp2/oracle", Status::Failed, &format!("gradients differ: `layers.0.mlp.down.weight`: 17 of 4096 element(s) outside allclose{evil}"));
    oracle.detail = level(
        "oracle",
        json!({ "comparisons": [
        { "what": "gradients", "passed": false, "compared": 21, "reference": "grads.safetensors", "candidate": "grads.safetensors",
          "failure": format!("`layers.0.mlp.down.weight`: 17 of 4096 element(s) outside allclose{evil}"),
          "report": { "tensors": [tensor("layers.0.mlp.down.weight", 3e-3, false), tensor(&format!("layers.1.attn.q.weight{evil}"), 1e-7, true)] } },
        { "what": "weights", "passed": true, "compared": 21, "reference": "w", "candidate": "w", "report": { "tensors": [] } } ], "collectives": 240 }),
    );
    jobs.push(oracle);
    let mut crash = job(
        "tiny@f32/dp2/forward",
        Status::Error,
        &format!("worker exited with signal 6: injected abort{evil}"),
    );
    crash.attempts[0] = Attempt { status: Status::Error, seconds: 0.1, exit: Some("signal 6".into()), log_tail: format!("--- stderr (last 2 lines) ---\nthread 'main' panicked{evil}\nerror: the job panicked\n"), dir: None };
    jobs.push(crash);
    jobs.push(job(
        "tiny@f32/dp2/curve",
        Status::Skipped,
        "skipped: dependency `tiny@f32/dp2/forward` did not pass",
    ));
    let mut hang = job(
        "tiny@f32/pp2/forward",
        Status::Timeout,
        "timed out after 2s",
    );
    hang.attempts[0] = Attempt {
        status: Status::Timeout,
        seconds: 2.0,
        exit: None,
        log_tail: String::new(),
        dir: None,
    };
    jobs.push(hang);
    jobs.push(job(
        "tiny@f32/pp2/curve",
        Status::NotRun,
        "not run: the run was interrupted",
    ));
    let mut flaky = job(
        "tiny@f32/pp2/roundtrip",
        Status::Flaky,
        "checkpoint match (21 compared)",
    );
    flaky.attempts = vec![
        Attempt {
            status: Status::Error,
            seconds: 0.05,
            exit: Some("signal 6".into()),
            log_tail: format!("aborted{evil}\n"),
            dir: None,
        },
        Attempt {
            status: Status::Passed,
            seconds: 0.05,
            exit: Some("0".into()),
            log_tail: String::new(),
            dir: None,
        },
    ];
    jobs.push(flaky);
    let mut caught = job(
        "tiny@f32/tp2/mutation[tp-skip-forward-all-reduce]",
        Status::Passed,
        "caught by forward, curve, oracle: logits and loss differ",
    );
    caught.detail = finding(
        json!({ "mutation": "tp-skip-forward-all-reduce", "caught": true, "caught_by": ["forward", "curve", "oracle"],
                            "altered": ["layers.0.mlp.down.fwd.all_reduce: skipped"], "levels": [], "seconds": 0.5 }),
    );
    jobs.push(caught);
    jobs.push(job(
        "tiny@f32/tp2/mutation[scale-one-rank-grad]",
        Status::Failed,
        &format!("NOT caught: every level passed with `scale-one-rank-grad` injected{evil}"),
    ));
    RunResults {
        format_version: FORMAT_VERSION,
        meta: RunMeta {
            spec: format!("examples/quickstart.toml{evil}"),
            spec_name: "quickstart".into(),
            spec_hash: "0123abcd".into(),
            git_commit: Some("deadbeef".into()),
            host: "ci-host".into(),
            backend: "burn-flex".into(),
            device: "cpu".into(),
            seed: 1234,
            meshparity_version: "0.1.0".into(),
            started: "2026-11-23T07:00:00Z".into(),
            finished: "2026-11-23T07:00:05Z".into(),
            seconds: 5.0,
            interrupted: false,
            run_dir: "run".into(),
            disk_bytes: None,
            partition: None,
            filters: Vec::new(),
        },
        jobs,
    }
}

pub fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
