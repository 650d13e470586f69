//! A level passes only against a reference that computes and trains (issue 37, item 4): two
//! dead models agree perfectly, and that agreement is no evidence. A learning rate of 0 and a
//! program whose output ignores its input fail as `vacuous`, on the built-in engine and on a
//! command engine; the same runs training normally pass (the quickstart's tests, and the hooks
//! trainer in tests/command.rs).

mod common;

use std::path::Path;

use common::harness::{engine_spec, fixture, meshparity, results};
use serde_json::Value;

/// Each job's (status, summary) by name, from a finished run.
fn jobs(run: &Path) -> Vec<(String, String, String)> {
    let r = results(run);
    r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j: &Value| {
            let s = |k: &str| j[k].as_str().unwrap_or_default().to_owned();
            (s("name"), s("status"), s("summary"))
        })
        .collect()
}

fn run(spec: &str) -> Vec<(String, String, String)> {
    let fx = fixture(spec);
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    jobs(&fx.path().join("run"))
}

fn status<'a>(jobs: &'a [(String, String, String)], name: &str) -> (&'a str, &'a str) {
    let (_, s, why) = jobs
        .iter()
        .find(|(n, ..)| n == name)
        .unwrap_or_else(|| panic!("no job {name} in {jobs:#?}"));
    (s, why)
}

/// The built-in engine with `lr = 0`: the forward level (no training involved) passes, the
/// curve fails as vacuous (its weights never move), and the oracle level after it is skipped.
#[test]
fn the_built_in_engine_at_learning_rate_zero_is_vacuous() {
    let jobs = run(r#"
[run]
name = "dead"
steps = 3
batch = 4
lr = 0.0

[models.tiny]
layers = 1
hidden = 16
heads = 2
ffn = 32
vocab = 32
seq_len = 8

[meshes.dp2]
dp = 2

[[matrix]]
levels = ["forward", "curve", "oracle"]
dtypes = ["f32", "bf16"]
mutations = false
"#);
    // bf16 too: its weights artifact holds the f32 master weights, its seed bf16 values.
    for dtype in ["f32", "bf16"] {
        let job = |level: &str| format!("tiny@{dtype}/dp2/{level}");
        assert_eq!(status(&jobs, &job("forward")).0, "passed");
        let (s, why) = status(&jobs, &job("curve"));
        assert_eq!(s, "failed", "{dtype}");
        assert!(
            why.starts_with("vacuous: none of the reference's"),
            "{dtype}: {why}"
        );
        assert_eq!(status(&jobs, &job("oracle")).0, "skipped");
    }
}

/// The repository's hooks trainer as a command engine, at `--lr 0` (the curve is flat and the
/// weights frozen) and with zero weights (every logit 0: constant over the vocabulary).
#[test]
fn a_program_that_does_not_train_is_vacuous() {
    if !common::numpy() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let engine = |extra: &str| {
        format!(
            r#"program = "python3"
args = ["{trainer}", "--dp", "{{{{dp}}}}", "--seed", "{{{{seed}}}}", "--steps", "{{{{steps}}}}", "--out", "{{{{out_dir}}}}", {extra}]
env = {{ PYTHONPATH = "{python}" }}
artifacts = {{ curve = "metrics.jsonl", logits = "logits.safetensors", grads = "grads.safetensors", weights = "final.safetensors", initial = "init.safetensors" }}"#,
            trainer = root.join("tests/consumers/hooks_trainer.py").display(),
            python = root.join("python").display(),
        )
    };
    let levels = r#"["forward", "curve", "oracle"]"#;
    let jobs = run(&engine_spec(&engine(r#""--lr", "0""#), "", levels));
    assert_eq!(status(&jobs, "m@f32/dp2/forward").0, "passed");
    let (s, why) = status(&jobs, "m@f32/dp2/curve");
    assert_eq!(s, "failed");
    assert!(why.starts_with("vacuous: the reference's loss is"), "{why}");

    let jobs = run(&engine_spec(&engine(r#""--constant-output""#), "", levels));
    let (s, why) = status(&jobs, "m@f32/dp2/forward");
    assert_eq!(s, "failed");
    assert!(
        why.starts_with("vacuous: the reference's logits are constant over the vocabulary"),
        "{why}"
    );
}
