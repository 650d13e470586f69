//! What the binary's integration tests share.

#![allow(dead_code, unused_macros)]

pub mod harness;
pub mod jobs;
pub mod slurm;

/// The binary from the repository root, colour off (what tests/cli/ and tests/plan.rs run),
/// failures not shrunk: shrinking is tested on its own (tests/shrink.rs), and the rest of the
/// tests judge verdicts.
pub fn cli() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("meshparity").unwrap();
    c.env("NO_COLOR", "1").env("MESHPARITY_NO_SHRINK", "1");
    c
}

/// What a command printed on stdout.
pub fn stdout(c: &mut assert_cmd::Command) -> String {
    String::from_utf8(c.output().unwrap().stdout).unwrap()
}

/// The tiny llama every runner test trains: fast on two cores, divisible by every mesh the
/// tests use (dp2, tp2, pp2). A macro so specs can be `concat!`-ed constants.
macro_rules! tiny_model {
    () => {
        r#"
[models.tiny]
family = "llama"
layers = 2
hidden = 32
heads = 4
kv_heads = 2
ffn = 48
vocab = 64
seq_len = 8
"#
    };
}

/// Whether python3 can run `import {modules}`. Without them a test says so and returns, except
/// under CI, which installs them (`.ci/run`) and so must run it: there a missing module fails.
pub fn python_has(modules: &str, pip: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have `{modules}`: `pip install {pip}` (see .ci/run)"
        );
        eprintln!("skipped: python3 cannot import {modules} (pip install {pip})");
    }
    ok
}

/// Whether numpy and safetensors import (the Python consumers' programs need them).
pub fn numpy() -> bool {
    python_has("numpy, safetensors", "numpy safetensors")
}

/// Whether torch (with torch.distributed) and safetensors import.
pub fn torch() -> bool {
    python_has("torch.distributed, safetensors", "torch safetensors numpy")
}

/// Whether torch and torchtitan import (meshparity_hooks.torchtitan runs torchtitan's Trainer).
pub fn torchtitan() -> bool {
    python_has(
        "torch.distributed, torchtitan, safetensors",
        "torch torchtitan safetensors numpy",
    )
}

/// `meshparity run ARGS --no-progress --run-dir RUN` from the repository root: its exit code
/// and the run's results.json.
pub fn run_in_repo(args: &[&str], run: &std::path::Path) -> (Option<i32>, serde_json::Value) {
    let status = assert_cmd::Command::cargo_bin("meshparity")
        .unwrap()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .env("MESHPARITY_NO_SHRINK", "1")
        .arg("run")
        .args(args)
        .args(["--no-progress", "--run-dir"])
        .arg(run)
        .output()
        .unwrap()
        .status;
    let text = std::fs::read_to_string(run.join("results.json")).unwrap();
    (status.code(), serde_json::from_str(&text).unwrap())
}

/// Make `dir` a git repository with everything in it committed once.
pub fn commit_all(dir: &std::path::Path) {
    for args in [
        &["init", "-q"][..],
        &["add", "."],
        &["commit", "-qm", "base"],
    ] {
        let ok = std::process::Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(["-c", "commit.gpgsign=false"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }
}

/// A forward, curve or oracle level's job held each rank's rows to the reference's (`artifacts.inputs`),
/// passed, on every step; other levels have no such comparison.
pub fn judged_inputs(job: &serde_json::Value) {
    let level = job["level"].as_str().unwrap_or("");
    let inputs: Vec<&serde_json::Value> = job["detail"]["comparisons"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["what"] == "inputs")
        .collect();
    if !matches!(level, "forward" | "curve" | "oracle") {
        assert!(inputs.is_empty(), "{}: {inputs:?}", job["name"]);
        return;
    }
    assert_eq!(inputs.len(), 1, "{}: no inputs judged", job["name"]);
    let c = inputs[0];
    assert!(
        c["passed"] == true && c["compared"].as_u64() > Some(0),
        "{c:#}"
    );
}

/// Where localization put the bug of the job whose name ends with `job`: (step, site, localized
/// as injected, cause as `kind` or `kind:axis`), from a run's results.json jobs.
pub fn located(jobs: &[serde_json::Value], job: &str) -> (u64, String, bool, String) {
    let j = jobs
        .iter()
        .find(|j| j["name"].as_str().unwrap().ends_with(job))
        .unwrap_or_else(|| panic!("no job for {job}"));
    let l = &j["detail"]["localization"];
    let cause = &l["cause"];
    let label = match cause["axis"].as_str() {
        Some(a) => format!("{}:{a}", cause["kind"].as_str().unwrap_or("?")),
        None => cause["kind"].as_str().unwrap_or("?").to_owned(),
    };
    (
        l["first"]["step"].as_u64().unwrap_or(u64::MAX),
        l["first"]["site"].as_str().unwrap_or("").to_owned(),
        j["detail"]["localized_as_injected"] == true,
        label,
    )
}

/// Every `meshparity compare` line a job's summary quotes names files the run kept (a caught
/// mutation keeps one failed comparison's files; its summary must quote that one's line).
pub fn summaries_cite_files_that_exist(run: &std::path::Path, r: &serde_json::Value) {
    let mut quoted = 0;
    for job in r["jobs"].as_array().unwrap() {
        let summary = job["summary"].as_str().unwrap();
        for (at, _) in summary.match_indices("meshparity compare ") {
            let words = summary[at..].split_whitespace().skip(2).take(2);
            for file in words {
                let file = file.trim_end_matches(')');
                assert!(run.join(file).exists(), "{}: {file} is gone", job["name"]);
            }
            quoted += 1;
        }
    }
    assert!(quoted > 0, "no summary quotes a compare line: {r:#}");
}
