//! The commands a run's records hand to users to reproduce what they report: a job's
//! `meshparity run … --filter` (safe to paste into a shell whatever the spec is called) and a
//! comparison's `meshparity compare` over files that exist when it is named; in CI ([`ci`]),
//! from a copy of the run directory alone, and the README's CI recipes as written.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod ci;

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
        .env("MESHPARITY_NO_SHRINK", "1")
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
        .env("MESHPARITY_NO_SHRINK", "1")
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
    // A record's paths are relative to its run directory, where its lines are pasted.
    let run_dir = fx.path().join("run");
    let dir_of = |j: &Value| run_dir.join(j["attempts"][0]["dir"].as_str().unwrap());
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
        .current_dir(&run_dir)
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
         [meshes.tp2sp]\ntp = 2\nsp = true\n\
         [[matrix]]\nmeshes = [\"tp2sp\"]\nlevels = [\"forward\", \"curve\"]\n\
         [mutations]\nselect = [\"dp-skip-grad-all-reduce\", \"tp-average-instead-of-sum\"]\n"
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
            .current_dir(fx.path().join("run"))
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

/// The `reproduce` property of every case of a run's junit.xml, unescaped, with its job name.
fn junit_reproduce_lines(junit: &str) -> Vec<String> {
    let unescape = |s: &str| {
        s.replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };
    junit
        .match_indices("<property name=\"reproduce\" value=\"")
        .map(|(i, m)| {
            let rest = &junit[i + m.len()..];
            unescape(&rest[..rest.find('"').unwrap()])
        })
        .collect()
}

/// Paste each reproduce line of `dir/run/junit.xml` into a shell in the run directory (with the
/// binary on PATH) and check that the one job it selects gets the verdict the run gave it.
fn paste_every_line(dir: &std::path::Path, first: &Value) {
    let exe = assert_cmd::cargo::cargo_bin("meshparity");
    let path = format!(
        "{}:{}",
        exe.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let junit = std::fs::read_to_string(dir.join("run/junit.xml")).unwrap();
    let lines = junit_reproduce_lines(&junit);
    let jobs = first["jobs"].as_array().unwrap();
    assert_eq!(lines.len(), jobs.len(), "one line per case: {junit}");
    for (i, line) in lines.iter().enumerate() {
        let out = StdCommand::new("sh")
            .arg("-c")
            .arg(format!("{line} --no-progress --run-dir again-{i}"))
            .env("PATH", &path)
            .current_dir(dir.join("run"))
            .output()
            .unwrap();
        let again: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("run/again-{i}/results.json")))
                .unwrap_or_else(|e| {
                    panic!("{line}: {e}: {}", String::from_utf8_lossy(&out.stderr))
                }),
        )
        .unwrap();
        let selected: Vec<&Value> = again["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["dependency"] != true)
            .collect();
        assert_eq!(selected.len(), 1, "{line}: {again:#}");
        let name = selected[0]["name"].as_str().unwrap();
        let before = jobs.iter().find(|j| j["name"] == name).unwrap();
        assert_eq!(
            selected[0]["status"], before["status"],
            "{line}: {name} was {} and is {}",
            before["status"], selected[0]["status"]
        );
    }
}

/// Every kind of job — reference, training, each level, a mutation, a failed check — from the
/// built-in engine's junit.xml: pasted, each reproduces its own verdict.
#[test]
fn pasted_reproduce_lines_give_the_same_verdict() {
    let spec = concat!(
        "[run]\nname = \"paste\"\nsteps = 2\nbatch = 4\n",
        tiny_model!(),
        "[meshes.dp2]\ndp = 2\n[meshes.tp2]\ntp = 2\n\
         [tolerances.exact]\nextends = \"builtin\"\nforward.f32 = { atol = 0.0, rtol = 0.0 }\n\
         [[matrix]]\nmeshes = [\"dp2\"]\nlevels = [\"roundtrip\", \"forward\", \"curve\", \"oracle\"]\n\
         [[matrix]]\nmeshes = [\"tp2\"]\nlevels = [\"forward\"]\ntolerance = \"exact\"\nmutations = false\n\
         [meshes.tp2sp]\ntp = 2\nsp = true\n\
         [[matrix]]\nmeshes = [\"tp2sp\"]\nlevels = [\"forward\", \"curve\"]\n\
         [mutations]\nselect = [\"dp-skip-grad-all-reduce\", \"tp-average-instead-of-sum\"]\n"
    );
    let (fx, r) = run_spec(spec, 1);
    let failed = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["status"] == "failed");
    assert_eq!(failed.count(), 1, "tp2's bit-exact forward: {r:#}");
    common::summaries_cite_files_that_exist(&fx.path().join("run"), &r);
    paste_every_line(fx.path(), &r);
}

/// The same for a command engine's jobs, its declared mutation and `[variants]` (a program
/// committed in git against its working tree).
#[test]
fn pasted_reproduce_lines_of_command_engines_and_variants_give_the_same_verdict() {
    if !common::numpy() {
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root.join("tests/consumers/hooks_trainer.py"),
        dir.path().join("train.py"),
    )
    .unwrap();
    let spec = format!(
        r#"[run]
name = "paste-cmd"
seed = 3
steps = 2
batch = 2

[engines.prog]
kind = "command"
program = "python3"
args = ["train.py", "--dp", "{{{{dp}}}}", "--seed", "{{{{seed}}}}", "--steps", "{{{{steps}}}}", "--out", "{{{{out_dir}}}}"]
env = {{ PYTHONPATH = "{python}" }}
artifacts = {{ curve = "metrics.jsonl", logits = "logits.safetensors", grads = "grads.safetensors", weights = "final.safetensors", initial = "init.safetensors" }}
mutations = {{ local-norm = ["--bug", "local-norm"] }}

[models.m]
engine = "prog"

[meshes.dp2]
dp = 2

[variants.base]
git = "HEAD"

[variants.feature]

[[matrix]]
models = ["m"]
levels = ["forward", "curve", "oracle"]
"#,
        python = root.join("python").display()
    );
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    common::commit_all(dir.path());
    let out = Command::cargo_bin("meshparity")
        .unwrap()
        .env("MESHPARITY_NO_SHRINK", "1")
        .current_dir(dir.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .output()
        .unwrap();
    let text = std::fs::read_to_string(dir.path().join("run/results.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(out.status.code(), Some(0), "{r:#}");
    let names: Vec<&str> = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert!(names.iter().any(|n| n.contains("/feature/")), "{names:?}");
    assert!(
        names.iter().any(|n| n.contains("mutation[local-norm]")),
        "{names:?}"
    );
    common::summaries_cite_files_that_exist(&dir.path().join("run"), &r);
    paste_every_line(dir.path(), &r);
}
