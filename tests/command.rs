//! The command engine on the real binary: a user's JAX trainer checked at world size 1 against
//! tp2, dp2 and tp2·dp2 with its own bugs caught (examples/command), and every way a command
//! goes wrong — not found, non-zero exit, hang, missing or malformed artifact, a template naming
//! an unknown value — a clear job (or spec) error with the rendered command and its output,
//! while no spec value can reach a shell.

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

fn meshparity() -> Command {
    let mut c = Command::cargo_bin("meshparity").unwrap();
    c.env("NO_COLOR", "1").env("MESHPARITY_NO_SHRINK", "1");
    c
}

/// A spec with one command engine and one model on dp2; an engine that maps no artifact
/// gets the curve mapped (the levels these tests select are judged from it).
fn spec(engine: &str, model_keys: &str, levels: &str) -> String {
    let engine = if engine.contains("artifacts") {
        engine.to_owned()
    } else {
        format!("{engine}\n{}", common::harness::CURVE_MAP)
    };
    common::harness::engine_spec(&engine, model_keys, levels)
}

struct Run {
    dir: tempfile::TempDir,
    code: Option<i32>,
    stderr: String,
}

impl Run {
    fn new(spec: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
        let out = meshparity()
            .current_dir(dir.path())
            .args([
                "run",
                "spec.toml",
                "--run-dir",
                "run",
                "--no-progress",
                "--retries",
                "0",
            ])
            .args(extra)
            .output()
            .unwrap();
        Self {
            dir,
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn results(&self) -> Value {
        let path = self.dir.path().join("run/results.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\nstderr:\n{}", path.display(), self.stderr));
        serde_json::from_str(&text).unwrap()
    }

    /// Status and summary (with the last attempt's log tail) of the job named `name`.
    fn job(&self, name: &str) -> (String, String) {
        let r = self.results();
        let job = r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == name)
            .unwrap_or_else(|| panic!("no job `{name}` in {r:#}"))
            .clone();
        let tail = job["attempts"]
            .as_array()
            .and_then(|a| a.last())
            .map(|a| a["log_tail"].as_str().unwrap_or("").to_owned())
            .unwrap_or_default();
        (
            job["status"].as_str().unwrap().to_owned(),
            format!("{}\n{tail}", job["summary"].as_str().unwrap()),
        )
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

#[test]
fn a_program_that_cannot_start_is_a_job_error_naming_it() {
    let r = Run::new(
        &spec(
            r#"program = "no-such-trainer-xyz"
args = ["--tp", "{{tp}}"]"#,
            "",
            r#"["curve"]"#,
        ),
        &[],
    );
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    let (status, why) = r.job("m@f32/reference");
    assert_eq!(status, "error");
    assert!(
        why.contains("cannot start `no-such-trainer-xyz --tp 1`"),
        "{why}"
    );
}

#[test]
fn a_non_zero_exit_is_a_job_error_with_the_command_and_its_output() {
    let r = Run::new(
        &spec(
            r#"program = "sh"
args = ["-c", "echo out of memory on rank 0 >&2; exit 3"]"#,
            "",
            r#"["curve"]"#,
        ),
        &[],
    );
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    let (status, why) = r.job("m@f32/reference");
    assert_eq!(status, "error");
    assert!(why.contains("exited with 3"), "{why}");
    assert!(why.contains("out of memory on rank 0"), "{why}");
    assert!(why.contains("`sh -c 'echo out of memory"), "{why}");
}

#[test]
fn a_hanging_program_times_out_with_its_command_in_the_log() {
    let r = Run::new(
        &spec(
            r#"program = "sleep"
args = ["600"]"#,
            "",
            r#"["curve"]"#,
        ),
        &["--timeout", "2", "--grace", "1"],
    );
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    let (status, why) = r.job("m@f32/reference");
    assert_eq!(status, "timeout", "{why}");
    assert!(why.contains("meshparity: running sleep 600"), "{why}");
}

#[test]
fn missing_and_malformed_artifacts_are_errors_naming_the_file() {
    let missing = Run::new(
        &spec(
            r#"program = "true"
artifacts = { curve = "metrics.jsonl" }"#,
            "",
            r#"["curve"]"#,
        ),
        &[],
    );
    let (status, why) = missing.job("m@f32/reference");
    assert_eq!(status, "error");
    assert!(
        why.contains("wrote no `metrics.jsonl` (artifacts.curve)"),
        "{why}"
    );
    assert!(why.contains("command: true"), "{why}");

    let malformed = Run::new(
        &spec(
            r#"program = "sh"
args = ["-c", "printf garbage > \"$1\"/logits.safetensors; echo '{\"step\": 1, \"loss\": 2}' > \"$1\"/m.jsonl", "sh", "{{out_dir}}"]
artifacts = { logits = "logits.safetensors", curve = "m.jsonl" }"#,
            "",
            r#"["forward"]"#,
        ),
        &[],
    );
    let (status, why) = malformed.job("m@f32/reference");
    assert_eq!(status, "error");
    assert!(
        why.contains("logits.safetensors` (artifacts.logits) is malformed"),
        "{why}"
    );

    // A level whose artifacts the engine does not map: a spec error at the level's name,
    // before anything runs (it was every job failing at run time on an internal file name).
    let unmapped = Run::new(
        &spec(
            r#"program = "sh"
args = ["-c", "echo '{\"step\": 1, \"loss\": 2}' > \"$1\"/m.jsonl", "sh", "{{out_dir}}"]
artifacts = { curve = "m.jsonl" }"#,
            "",
            r#"["curve", "oracle"]"#,
        ),
        &[],
    );
    assert_eq!(unmapped.code, Some(2), "{}", unmapped.stderr);
    assert!(
        unmapped.stderr.contains(
            "level `oracle` needs `grads` and `weights` in [engines.prog.artifacts] (its mesh runs)"
        ),
        "{}",
        unmapped.stderr
    );
}

#[test]
fn a_template_naming_an_unknown_value_is_a_spec_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        spec(
            r#"program = "echo"
args = ["--tp", "{{tensor_parallel}}"]"#,
            "",
            r#"["curve"]"#,
        ),
    )
    .unwrap();
    let out = meshparity()
        .current_dir(dir.path())
        .args(["validate", "spec.toml"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("spec.toml:15:10"),
        "points at the model's engine: {err}"
    );
    assert!(err.contains("unknown value `tensor_parallel`"), "{err}");
    assert!(
        err.contains("(known: attention_dropout, batch, clip_grad_norm, cp, dp,"),
        "lists what exists: {err}"
    );
}

/// Hostile values in model keys reach the program as one literal argument each, with and
/// without `shell = true`; nothing they spell is ever executed.
#[test]
fn spec_values_never_reach_a_shell() {
    let hostile = [
        ("dollar", "$(touch pwned-dollar)"),
        ("semi", "x; touch pwned-semi"),
        ("tick", "`touch pwned-tick`"),
        ("quote", "it's'; touch pwned-quote; '"),
    ];
    let keys: String = hostile
        .iter()
        .map(|(k, v)| format!("{k} = {v:?}\n"))
        .collect();
    // The program writes its arguments, one per line, and a curve of the spec's two steps.
    let writer = r#"for a in "$@"; do printf '%s\n' "$a"; done > args.txt; printf '{"step": 1, "loss": 2}\n{"step": 2, "loss": 1}\n' > m.jsonl"#;
    for shell in [false, true] {
        // TOML multi-line literal strings: the shell text goes in as written.
        let engine = if shell {
            format!(
                r#"program = '''sh -c '{}' sh'''
args = ["{{{{dollar}}}}", "{{{{semi}}}}", "{{{{tick}}}}", "{{{{quote}}}}"]
shell = true
cwd = "{{{{out_dir}}}}"
artifacts = {{ curve = "m.jsonl" }}"#,
                writer.replace('\'', r"'\''")
            )
        } else {
            format!(
                r#"program = "sh"
args = ["-c", '''{writer}''', "sh", "{{{{dollar}}}}", "{{{{semi}}}}", "{{{{tick}}}}", "{{{{quote}}}}"]
cwd = "{{{{out_dir}}}}"
artifacts = {{ curve = "m.jsonl" }}"#
            )
        };
        let r = Run::new(&spec(&engine, &keys, r#"["curve"]"#), &[]);
        assert_eq!(r.code, Some(0), "shell={shell}: {}", r.stderr);
        let args = find(r.path(), "args.txt");
        assert!(!args.is_empty(), "the program ran");
        for a in &args {
            let got = std::fs::read_to_string(a).unwrap();
            let want: String = hostile.iter().map(|(_, v)| format!("{v}\n")).collect();
            assert_eq!(got, want, "shell={shell}");
        }
        let pwned = find(r.path(), "pwned");
        assert!(pwned.is_empty(), "shell={shell}: {pwned:?}");
    }
}

/// Files under `dir` whose name contains `needle`.
fn find(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap().to_string_lossy().contains(needle) {
                out.push(p);
            }
        }
    }
    out
}

/// The README's command-engine example: every level passes on the correct meshes and every
/// bug the program declares is caught where it applies.
#[test]
fn the_jax_example_passes_and_catches_its_bugs() {
    if !common::harness::jax() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let (code, results) = common::run_in_repo(
        &["examples/command/jax-tp-dp.toml"],
        &out.path().join("run"),
    );
    let jobs = results["jobs"].as_array().unwrap();
    assert_eq!(code, Some(0), "{results:#}");
    assert_eq!(jobs.len(), 26);
    let mutations: Vec<&Value> = jobs.iter().filter(|j| j["kind"] == "mutation").collect();
    assert_eq!(mutations.len(), 10, "5 bugs on tp2·dp2, 3 on dp2, 2 on tp2");
    for j in jobs {
        assert_eq!(j["status"], "passed", "{j:#}");
    }
    // Localized from the program's own per-site traces (`--trace-dir`), or to the checkpoint.
    for m in mutations {
        let summary = m["summary"].as_str().unwrap();
        assert!(summary.starts_with("caught by"), "{m:#}");
        let name = m["name"].as_str().unwrap();
        let site = [
            (
                "skip-tp-psum",
                "first divergence: step 0, forward, layers.0.mlp.out",
            ),
            (
                "skip-dp-grad-psum",
                "first divergence: step 0, gradients, grad.",
            ),
            (
                "local-loss-normalization",
                "first divergence: step 0, gradients, grad.",
            ),
            ("drop-tp-shard", "first divergence: checkpoint save/load"),
            (
                "write-dp-shard-as-whole",
                "first divergence: step 0, forward, embed.out (shape ",
            ),
        ]
        .iter()
        .find(|(bug, _)| name.contains(&format!("[{bug}]")))
        .map(|(_, site)| *site)
        .unwrap_or_else(|| panic!("unexpected mutation {name}"));
        // A batch-valued site may name the replica whose rows diverge first ("step 0,
        // microbatch 0 (replica 0), forward, …"): the rows are the dp replicas' in order.
        let fits = match site.split_once("step 0, ") {
            Some((head, rest)) => {
                summary.contains(&format!("{head}step 0, "))
                    && summary.contains(&format!(", {rest}"))
            }
            None => summary.contains(site),
        };
        assert!(fits, "{name}: {summary}");
    }
    assert_eq!(results["meta"]["backend"], "command:jax");

    // The same program as committed (a snapshot of HEAD) against the working tree.
    let (code, results) = common::run_in_repo(
        &["examples/command/variants.toml"],
        &out.path().join("variants"),
    );
    assert_eq!(code, Some(0), "{results:#}");
    assert_eq!(results["jobs"].as_array().unwrap().len(), 12);
    // The program's step times, base beside feature, reported and not gated.
    let summary = std::fs::read_to_string(out.path().join("variants/summary.md")).unwrap();
    let perf = &summary[summary
        .find("### Performance")
        .expect("a performance table")..];
    assert!(perf.contains("| step_time_s |"), "{perf}");
}

/// A program that writes its artifacts with the repository's Python helper
/// (`python/meshparity_hooks`), checked with default keys: dp2 passes, its bug is caught.
#[test]
fn a_program_using_the_python_hooks_is_checked() {
    if !common::numpy() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let engine = format!(
        r#"program = "python3"
args = ["{trainer}", "--dp", "{{{{dp}}}}", "--seed", "{{{{seed}}}}", "--steps", "{{{{steps}}}}", "--out", "{{{{out_dir}}}}"]
env = {{ PYTHONPATH = "{python}" }}
artifacts = {{ curve = "metrics.jsonl", logits = "logits.safetensors", grads = "grads.safetensors", weights = "final.safetensors", initial = "init.safetensors" }}
mutations = {{ local-norm = ["--bug", "local-norm"] }}"#,
        trainer = root.join("tests/consumers/hooks_trainer.py").display(),
        python = root.join("python").display(),
    );
    let r = Run::new(&spec(&engine, "", r#"["forward", "curve", "oracle"]"#), &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    for level in ["forward", "curve", "oracle"] {
        assert_eq!(r.job(&format!("m@f32/dp2/{level}")).0, "passed");
    }
    let (status, why) = r.job("m@f32/dp2/mutation[local-norm]");
    assert_eq!(status, "passed", "{why}");
    assert!(why.starts_with("caught by"), "{why}");
}

/// `[variants]`: a program committed in a git repository (base, a snapshot of HEAD) against its
/// working tree (feature), on the same mesh. Unchanged, every level passes (the base ran twice
/// and its zero envelope is handled); a change to the training step is caught.
#[test]
fn variants_judge_the_working_tree_against_a_commit() {
    if !common::numpy() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    std::fs::copy(
        root.join("tests/consumers/hooks_trainer.py"),
        r.join("train.py"),
    )
    .unwrap();
    let spec = format!(
        r#"[run]
name = "variants"
seed = 3
steps = 3
batch = 2
output = "out"

[engines.prog]
kind = "command"
program = "python3"
args = ["train.py", "--dp", "{{{{dp}}}}", "--seed", "{{{{seed}}}}", "--steps", "{{{{steps}}}}", "--out", "{{{{out_dir}}}}"]
env = {{ PYTHONPATH = "{python}" }}
artifacts = {{ curve = "metrics.jsonl", logits = "logits.safetensors", grads = "grads.safetensors", weights = "final.safetensors", initial = "init.safetensors" }}

[models.m]
engine = "prog"

[meshes.dp2]
dp = 2

[variants.base]
git = "HEAD"
repeats = 2

[variants.feature]

[[matrix]]
models = ["m"]
levels = ["forward", "curve", "oracle"]
"#,
        python = root.join("python").display()
    );
    std::fs::write(r.join("spec.toml"), spec).unwrap();
    common::commit_all(r);
    let run = |dir: &str| -> (Option<i32>, Value) {
        let out = meshparity()
            .current_dir(r)
            .args(["run", "spec.toml", "--no-progress", "--run-dir", dir])
            .output()
            .unwrap();
        let text = std::fs::read_to_string(r.join(dir).join("results.json")).unwrap();
        (out.status.code(), serde_json::from_str(&text).unwrap())
    };
    let (code, same) = run("same");
    assert_eq!(code, Some(0), "{same:#}");
    let jobs = same["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 6, "base ×2, feature, three levels: {same:#}");
    let curve = jobs
        .iter()
        .find(|j| j["name"] == "m@f32/dp2/feature/curve")
        .unwrap();
    let comparison = &curve["detail"]["comparisons"][0];
    assert!(
        comparison["report"]["notes"]
            .to_string()
            .contains("bit-identical"),
        "a deterministic base: zero envelope, judged per step: {curve:#}"
    );
    assert!(
        comparison["reproduce"]
            .as_str()
            .unwrap()
            .contains("--mode noise-floor --baseline2"),
        "{curve:#}"
    );
    // The feature branch changes the step size: caught, while the base is still HEAD's.
    let text = std::fs::read_to_string(r.join("train.py")).unwrap();
    let step = "\"--lr\", type=float, default=0.05";
    assert!(text.contains(step), "the trainer's step size moved: {text}");
    std::fs::write(
        r.join("train.py"),
        text.replace(step, "\"--lr\", type=float, default=0.06"),
    )
    .unwrap();
    let (code, changed) = run("changed");
    assert_eq!(code, Some(1), "{changed:#}");
    let status = |name: &str| {
        changed["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == name)
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(
        status("m@f32/dp2/feature/forward"),
        "passed",
        "the first step is the same"
    );
    assert_eq!(status("m@f32/dp2/feature/curve"), "failed");
}

/// `reference = "NAME"`: the world-size-1 oracle is another command (a single-device script)
/// than the distributed trainer it judges.
#[test]
fn the_reference_can_run_on_another_engine() {
    if !common::numpy() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let trainer = root.join("tests/consumers/hooks_trainer.py");
    let python = root.join("python");
    let engine = |dp: &str| {
        format!(
            r#"kind = "command"
program = "python3"
args = ["{trainer}", "--dp", "{dp}", "--seed", "{{{{seed}}}}", "--steps", "{{{{steps}}}}", "--out", "{{{{out_dir}}}}"]
env = {{ PYTHONPATH = "{python}" }}
artifacts = {{ curve = "metrics.jsonl", logits = "logits.safetensors", grads = "grads.safetensors", weights = "final.safetensors" }}"#,
            trainer = trainer.display(),
            python = python.display(),
        )
    };
    let spec = format!(
        r#"[run]
seed = 3
steps = 2
batch = 2

[engines.dist]
{dist}

[engines.single]
{single}

[models.m]
engine = "dist"
reference = "single"

[meshes.dp2]
dp = 2

[[matrix]]
models = ["m"]
levels = ["forward", "curve", "oracle"]
"#,
        dist = engine("{{dp}}"),
        single = engine("1"),
    );
    let r = Run::new(&spec, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let results = r.results();
    let reference = results["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["kind"] == "reference")
        .unwrap()
        .clone();
    let dir = reference["detail"]["artifacts"].as_str().unwrap();
    let manifest = std::fs::read_to_string(Path::new(dir).join("manifest.json")).unwrap();
    assert!(manifest.contains("\"command:single\""), "{manifest}");
    let dir = results["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["kind"] == "train")
        .unwrap()["detail"]["artifacts"]
        .as_str()
        .unwrap()
        .to_owned();
    let manifest = std::fs::read_to_string(Path::new(&dir).join("manifest.json")).unwrap();
    assert!(manifest.contains("\"command:dist\""), "{manifest}");
}
