//! What the tests of hostile programs and hostile inputs share (tests/programs.rs,
//! tests/limits.rs): the real binary with a patience limit, a spec in a temporary directory,
//! the files and processes a run leaves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

/// Nothing here may take long; a hang fails the test instead of blocking CI.
pub const PATIENCE: Duration = Duration::from_secs(180);

pub fn meshparity(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("meshparity").unwrap();
    c.current_dir(dir)
        .env("NO_COLOR", "1")
        // Shrinking is tested on its own (tests/shrink.rs).
        .env("MESHPARITY_NO_SHRINK", "1")
        .env_remove("MESHPARITY_TEST_FAULT")
        .timeout(PATIENCE);
    c
}

pub fn fixture(spec: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    dir
}

/// Every file below `dir`, links not followed.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

pub fn results(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap()
}

/// `meshparity run spec.toml` in `dir` (into `dir/run`), which must pass every job: its
/// results.json; otherwise a failure listing each failed job with its summary.
pub fn run_passing(dir: &Path) -> Value {
    let out = meshparity(dir)
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .output()
        .unwrap();
    let r = results(&dir.join("run"));
    let bad: Vec<String> = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["status"] != "passed")
        .map(|j| format!("{}: {}", j["name"], j["summary"]))
        .collect();
    assert_eq!(out.status.code(), Some(0), "{bad:#?}");
    r
}

/// `spec` refused by `meshparity validate` (exit 2) with a message located in the spec that
/// says `says`.
pub fn refused(spec: &str, says: &str) {
    let fx = fixture(spec);
    let out = meshparity(fx.path())
        .args(["validate", "spec.toml"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{spec}: {err}");
    assert!(
        err.contains("spec.toml:") && err.contains(says),
        "{says}: {err}"
    );
}

/// The JSON header of a safetensors file.
pub fn safetensors_header(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    serde_json::from_slice(&bytes[8..8 + n]).unwrap()
}

/// The artifact mapping of [`command_spec`]'s engine: the curve level needs one.
pub const CURVE_MAP: &str = r#"artifacts = { curve = "metrics.jsonl" }"#;

/// A command engine with one program, on dp2, at the curve level.
pub fn command_spec(args: &str) -> String {
    engine_spec(
        &format!("program = \"sh\"\nargs = {args}\n{CURVE_MAP}"),
        "",
        r#"["curve"]"#,
    )
}

/// A spec with one command engine (`engine` is its table body after `kind`) and one model
/// (`model_keys` added to it) on dp2, at `levels`.
pub fn engine_spec(engine: &str, model_keys: &str, levels: &str) -> String {
    format!(
        r#"
[run]
name = "cmd"
seed = 3
steps = 2
batch = 2

[engines.prog]
kind = "command"
{engine}

[models.m]
engine = "prog"
{model_keys}

[meshes.dp2]
dp = 2

[[matrix]]
models = ["m"]
levels = {levels}
"#
    )
}

pub fn disk_use(dir: &Path) -> u64 {
    files(dir)
        .iter()
        .map(|p| std::fs::symlink_metadata(p).map_or(0, |m| m.len()))
        .sum()
}

/// Processes whose command line holds `marker`.
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .chars()
            .all(|c| c.is_ascii_digit())
        {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(marker) {
            out.push(cmd);
        }
    }
    out
}

/// Wait up to `secs` for no process with `marker` to be left.
pub fn gone_within(marker: &str, secs: u64) -> Vec<String> {
    let t = std::time::Instant::now();
    loop {
        let left = processes_with(marker);
        if left.is_empty() || t.elapsed() > Duration::from_secs(secs) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the JAX example can run here (CI installs JAX: there it must).
pub fn jax() -> bool {
    super::python_has("jax, safetensors, numpy", "jax safetensors numpy")
}
