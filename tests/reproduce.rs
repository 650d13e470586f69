//! The commands a run's records hand to users to reproduce what they report: a job's
//! `meshparity run … --filter` (safe to paste into a shell whatever the spec is called) and a
//! comparison's `meshparity compare` over files that exist when it is named.

#[macro_use]
mod common;

use std::path::PathBuf;
use std::process::Command as StdCommand;

use assert_cmd::Command;
use serde_json::Value;

/// `meshparity run` of `spec` in a new directory (into `run/`), which must exit `code`; the
/// directory and the run's results.
fn run_spec(spec: &str, code: i32) -> (tempfile::TempDir, Value) {
    let fx = tempfile::tempdir().unwrap();
    std::fs::write(fx.path().join("spec.toml"), spec).unwrap();
    Command::cargo_bin("meshparity")
        .unwrap()
        .current_dir(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .assert()
        .code(code);
    let text = std::fs::read_to_string(fx.path().join("run/results.json")).unwrap();
    (fx, serde_json::from_str(&text).unwrap())
}

/// The stored reproduce command quotes the spec path: pasted into a shell, a spec named
/// `$(touch pwned).toml` is a file name, not a command.
#[test]
fn reproduce_commands_quote_the_spec_path() {
    let dir = tempfile::tempdir().unwrap();
    let name = "$(touch pwned).toml";
    std::fs::write(
        dir.path().join(name),
        "[run]\nname = \"q\"\nsteps = 1\nbatch = 2\n[models.m]\nlayers = 1\nhidden = 16\n\
         heads = 2\nffn = 16\nvocab = 16\nseq_len = 4\n[meshes.dp2]\ndp = 2\n\
         [[matrix]]\nlevels = [\"forward\"]\n",
    )
    .unwrap();
    Command::cargo_bin("meshparity")
        .unwrap()
        .current_dir(dir.path())
        .args(["run", name, "--no-progress", "--run-dir", "run"])
        .assert()
        .code(0);
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("run/results.json")).unwrap(),
    )
    .unwrap();
    let reproduce = r["jobs"][0]["reproduce"].as_str().unwrap().to_owned();
    assert!(reproduce.contains("'"), "{reproduce}");
    let out = StdCommand::new("sh")
        .arg("-c")
        .arg(format!(
            "printf '%s\\n' {}",
            reproduce.trim_start_matches("meshparity run ")
        ))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(
        words.lines().any(|w| w.ends_with("$(touch pwned).toml")),
        "{words}"
    );
    assert!(
        !dir.path().join("pwned").exists(),
        "the shell ran the file name: {reproduce}"
    );
}

/// A passing oracle writes no weight updates; a failing one writes both sides', and the
/// `meshparity compare` command its verdict names re-derives the failure from them.
#[test]
fn a_failed_oracle_leaves_the_updates_its_reproduce_command_reads() {
    let spec = concat!(
        "[run]\nname = \"upd\"\nbatch = 4\n",
        tiny_model!(),
        "[meshes.dp2]\ndp = 2\n[meshes.tp2]\ntp = 2\n\
         [tolerances.strict]\nextends = \"builtin\"\noracle.f32 = { mean_abs_pct = 1e-30 }\n\
         [[matrix]]\nmeshes = [\"dp2\"]\nlevels = [\"oracle\"]\n\
         [[matrix]]\nmeshes = [\"tp2\"]\nlevels = [\"oracle\"]\ntolerance = \"strict\"\n"
    );
    let (fx, r) = run_spec(spec, 1);
    let oracle = |mesh: &str| {
        r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["mesh"] == mesh && j["kind"] == "oracle")
            .unwrap_or_else(|| panic!("{mesh}'s oracle job in {r:#}"))
            .clone()
    };
    let dir_of = |j: &Value| PathBuf::from(j["attempts"][0]["dir"].as_str().unwrap());
    let (pass, fail) = (oracle("dp2"), oracle("tp2"));
    assert_eq!(pass["status"], "passed", "{pass:#}");
    assert!(!dir_of(&pass).join("updates.safetensors").exists());
    assert_eq!(fail["status"], "failed", "{fail:#}");
    for f in ["updates.safetensors", "reference-updates.safetensors"] {
        assert!(dir_of(&fail).join(f).exists(), "{f} in {:?}", dir_of(&fail));
    }
    let updates = fail["detail"]["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["what"] == "updates")
        .expect("the updates comparison")
        .clone();
    assert_eq!(updates["passed"], false, "{updates:#}");
    let cmd = updates["reproduce"].as_str().unwrap();
    assert!(cmd.starts_with("meshparity compare "), "{cmd}");
    let exe = assert_cmd::cargo::cargo_bin("meshparity");
    let out = StdCommand::new("sh")
        .arg("-c")
        .arg(cmd.replacen("meshparity", &exe.display().to_string(), 1))
        .current_dir(fx.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{cmd}: {out:?}");
}

/// Every job's reproduce line, pasted into a shell, selects exactly that job: a mutation job's
/// name holds `[…]`, which the filter read as a glob class (nothing selected, exit 4).
#[test]
fn every_reproduce_line_selects_exactly_its_job() {
    let spec = concat!(
        "[run]\nname = \"rep\"\nsteps = 2\nbatch = 4\n",
        tiny_model!(),
        "[meshes.dp2]\ndp = 2\n[[matrix]]\nlevels = [\"forward\", \"oracle\"]\n\
         [mutations]\nselect = [\"dp-skip-grad-all-reduce\"]\n"
    );
    let (fx, r) = run_spec(spec, 0);
    let exe = assert_cmd::cargo::cargo_bin("meshparity");
    for job in r["jobs"].as_array().unwrap() {
        let line = job["reproduce"].as_str().unwrap();
        let args = line.trim_start_matches("meshparity run ");
        // What the line selects, as `plan` lists it: the job and the dependencies it needs.
        let out = StdCommand::new("sh")
            .arg("-c")
            .arg(format!("{} plan {args} --format json", exe.display()))
            .current_dir(fx.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{line}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
        let selected: Vec<&str> = plan["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["role"] != "dependency")
            .map(|j| j["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            selected,
            [job["name"].as_str().unwrap()],
            "{line}: {plan:#}"
        );
    }
}
