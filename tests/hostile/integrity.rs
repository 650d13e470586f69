//! Evidence that is stale, empty, borrowed or hostile never passes (issue 60): a reused run
//! directory, a resumed record judged under other limits or by another build, a program's
//! curve with a repeated or missing step, logits that are missing or empty, a program's escape
//! sequences, paths that leave their directory, a calibration whose program never ends.

use std::path::Path;

use super::*;

/// A command engine (`prog.py MODE OUT WORLD_SIZE`) writing a curve and logits, four steps,
/// on dp2 at the forward and curve levels.
const PROGRAM: &str = r#"
import json, os, sys
import numpy as np
from safetensors.numpy import save_file
mode, out, ws = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(out, exist_ok=True)
steps = [(s, 2.0 - 0.1 * s) for s in range(1, 5)]
if mode == "repeated" and ws > 1:
    steps.append((4, 99.0))  # every rank appending its own loss; one diverged
if mode == "short":
    steps = steps[:1]
with open(os.path.join(out, "metrics.jsonl"), "w") as f:
    for s, l in steps:
        f.write(json.dumps({"step": s, "loss": l}) + "\n")
logits = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
t = {"logits": logits, "loss": np.array([1.0], np.float32)}
if mode == "empty":
    t = {"logits": np.zeros((0, 8), np.float32), "loss": np.zeros((0,), np.float32)}
if mode == "other":
    t = {"x": logits}
save_file(t, os.path.join(out, "logits.safetensors"))
"#;

fn program_spec(mode: &str) -> String {
    format!(
        r#"
[run]
name = "prog"
seed = 3
steps = 4
batch = 2
[engines.prog]
kind = "command"
program = "python3"
args = ["prog.py", "{mode}", "{{{{out_dir}}}}", "{{{{world_size}}}}"]
artifacts = {{ curve = "metrics.jsonl", logits = "logits.safetensors" }}
[models.m]
engine = "prog"
[meshes.dp2]
dp = 2
[[matrix]]
models = ["m"]
levels = ["forward", "curve"]
"#
    )
}

/// The record of job `name` in a run directory's results.
fn job(run_dir: &Path, name: &str) -> Value {
    results(run_dir)["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == name)
        .unwrap_or_else(|| panic!("no job {name}"))
        .clone()
}

fn tight(spec: &str) -> String {
    spec.replace(
        "[mutations]",
        "[tolerances.default]\nextends = \"builtin\"\nforward.f32 = { relative_l2 = 1e-30 }\n\n[mutations]",
    )
}

/// The stale-record path of the report: a loose run, then a tight one into the same
/// directory, then a resume. A run directory is one run (`--run-dir` into another run is
/// refused; `--force` clears it), and a resumed record counts only under its fingerprint: the
/// tight table's forward level is judged, and fails, however the directory was reused.
#[test]
fn a_record_judged_under_other_limits_never_passes_a_resumed_run() {
    let fx = fixture();
    std::fs::write(fx.path().join("tight.toml"), tight(SPEC)).unwrap();
    let run = |args: &[&str]| {
        let mut c = meshparity(fx.path());
        c.args(["run", "--no-progress"]).args(args);
        c
    };
    run(&["spec.toml", "--run-dir", "D"]).assert().code(0);
    let err = stderr_of(&mut run(&["tight.toml", "--run-dir", "D"]), 2);
    assert!(
        err.contains("holds another run") && err.contains("--force"),
        "{err}"
    );
    // Nothing of the loose run is left for a resume to borrow.
    run(&[
        "tight.toml",
        "--run-dir",
        "D",
        "--force",
        "-f",
        "level=reference",
    ])
    .assert()
    .code(0);
    run(&["tight.toml", "--resume", "D"]).assert().code(1);
    let forward = job(&fx.path().join("D"), "tiny@f32/dp2/forward");
    assert_eq!(forward["status"], "failed", "{forward:#}");
    // The same with the spec itself edited in place and --resume-force: the records whose
    // fingerprint the tighter table changed run again; the rest are kept.
    run(&["spec.toml", "--run-dir", "E"]).assert().code(0);
    std::fs::write(fx.path().join("spec.toml"), tight(SPEC)).unwrap();
    run(&["spec.toml", "--resume", "E", "--resume-force"])
        .assert()
        .code(1);
    let e = fx.path().join("E");
    assert_eq!(job(&e, "tiny@f32/dp2/forward")["status"], "failed");
    assert_eq!(job(&e, "tiny@f32/dp2/train")["status"], "passed");
    // A directory holding anything but a run is never cleared.
    std::fs::create_dir(fx.path().join("mine")).unwrap();
    std::fs::write(fx.path().join("mine/notes.txt"), "keep").unwrap();
    let err = stderr_of(&mut run(&["spec.toml", "--run-dir", "mine", "--force"]), 2);
    assert!(err.contains("not a meshparity run directory"), "{err}");
    assert!(fx.path().join("mine/notes.txt").exists());
}

/// A resume by another build (here the same binary copied: another file, another time) of a
/// run that did not finish (here: one mesh of two) reruns what the old build judged, instead of
/// failing forever on the old build's cache entry ("artifacts … are missing … run that job
/// first": the kept reference record pointed at it).
#[test]
fn resume_after_a_rebuild_reruns_instead_of_failing() {
    let fx = fixture();
    meshparity(fx.path())
        .args([
            "run",
            "spec.toml",
            "--no-progress",
            "--run-dir",
            "r",
            "-f",
            "mesh=dp2",
        ])
        .assert()
        .code(0);
    let rebuilt = fx.path().join("meshparity-rebuilt");
    std::fs::copy(assert_cmd::cargo::cargo_bin("meshparity"), &rebuilt).unwrap();
    let out = StdCommand::new(&rebuilt)
        .current_dir(fx.path())
        .env("NO_COLOR", "1")
        .env("MESHPARITY_NO_SHRINK", "1")
        .args(["run", "spec.toml", "--no-progress", "--resume", "r"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r = results(&fx.path().join("r"));
    assert!(statuses(&r).iter().all(|s| s == "passed"), "{r:#}");
    assert!(!err.contains("are missing"), "{err}");
}

/// A program's curve and logits with too little or contradictory evidence: each a job error
/// naming what is wrong, never a pass (they all passed).
#[test]
fn a_programs_repeated_missing_or_empty_evidence_is_an_error() {
    if !common::python_has("numpy, safetensors", "numpy safetensors") {
        return;
    }
    let cases = [
        (
            "repeated",
            "m@f32/dp2/train",
            "step 4 appears on lines 4 and 5",
        ),
        (
            "short",
            "m@f32/dp2/curve",
            "logs 1 step(s) of the 4 it trains",
        ),
        ("empty", "m@f32/dp2/forward", "has no elements"),
        ("other", "m@f32/dp2/forward", "no tensor named `logits`"),
    ];
    for (mode, at, says) in cases {
        let fx = tempfile::tempdir().unwrap();
        std::fs::write(fx.path().join("prog.py"), PROGRAM).unwrap();
        std::fs::write(fx.path().join("spec.toml"), program_spec(mode)).unwrap();
        let out = meshparity(fx.path())
            .args(["run", "spec.toml", "--no-progress", "--run-dir", "r"])
            .output()
            .unwrap();
        let r = results(&fx.path().join("r"));
        assert_ne!(out.status.code(), Some(0), "{mode}: {r:#}");
        let j = job(&fx.path().join("r"), at);
        let summary = j["summary"].as_str().unwrap();
        assert_eq!(j["status"], "error", "{mode}: {j:#}");
        assert!(summary.contains(says), "{mode}: {summary}");
    }
}

/// A program's error line that erases the runner's line and prints a green PASSED, sets the
/// window title and hides text: shown escaped on the terminal, obeyed nowhere.
#[test]
fn a_programs_escape_sequences_are_shown_not_obeyed() {
    let fx = tempfile::tempdir().unwrap();
    let spec = common::harness::command_spec(
        r#"["-c", "printf 'Error: \\r\\033[2K\\033[32m  PASSED \\033]0;pwned\\007 \\033[8mhidden\\n' >&2; exit 1"]"#,
    );
    std::fs::write(fx.path().join("spec.toml"), spec).unwrap();
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "r"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        !err.contains('\x1b') && !err.contains('\r') && !err.contains('\x07'),
        "{err:?}"
    );
    assert!(
        err.contains(r"Error: \r\x1b[2K\x1b[32m  PASSED \x1b]0;pwned\x07"),
        "{err}"
    );
}

/// An index whose weight_map leaves its directory (`../`, an absolute path) or names a link
/// out of it, and a sharded checkpoint's link: refused by the one rule, never read (`compare`
/// said MATCH against the reference's own file).
#[test]
fn a_checkpoints_names_stay_inside_its_directory() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::create_dir_all(root.join("ref")).unwrap();
    safetensors(&root.join("ref/model.safetensors"));
    let reference = root.join("ref/model.safetensors");
    let absolute = reference.display().to_string();
    for (dir, shard) in [
        ("up", "../ref/model.safetensors"),
        ("abs", absolute.as_str()),
        ("link", "model-1.safetensors"),
    ] {
        let cand = root.join(dir);
        std::fs::create_dir(&cand).unwrap();
        let index = serde_json::json!({"weight_map": {"w": shard}});
        std::fs::write(cand.join("model.safetensors.index.json"), index.to_string()).unwrap();
        if dir == "link" {
            std::os::unix::fs::symlink(&reference, cand.join(shard)).unwrap();
        }
        let err = stderr_of(
            meshparity(root).args(["compare", "ref/model.safetensors", dir]),
            2,
        );
        assert!(
            err.contains("must be a regular file inside its directory"),
            "{dir}: {err}"
        );
    }
    // meshparity's own sharded layout: a rank file that is a link out of the directory.
    let sharded = root.join("sharded");
    std::fs::create_dir(&sharded).unwrap();
    let index = serde_json::json!({"format": "meshparity-sharded/1", "tensors": {
        "w": {"shape": [1], "dtype": "F32", "shards": [{"file": "rank-00000.safetensors"}]}}});
    std::fs::write(sharded.join("index.json"), index.to_string()).unwrap();
    std::os::unix::fs::symlink(&reference, sharded.join("rank-00000.safetensors")).unwrap();
    let err = stderr_of(
        meshparity(root).args(["compare", "ref/model.safetensors", "sharded"]),
        2,
    );
    assert!(err.contains("symbolic link"), "{err}");
}

/// One 1 MiB shard listed as 2,500 replicas: read once, within a small address space (each
/// piece was cloned: 2.5 GB). Zero elements compared is nothing compared (exit 2), not MATCH.
#[test]
fn replicas_are_read_once_and_empty_tensors_compare_nothing() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("replicas");
    std::fs::create_dir(&dir).unwrap();
    let n = 1 << 18;
    let header = format!(
        r#"{{"w":{{"dtype":"F32","shape":[{n}],"data_offsets":[0,{}]}}}}"#,
        4 * n
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(std::iter::repeat_n(0x3f80_0000u32.to_le_bytes(), n).flatten());
    std::fs::write(dir.join("rank-00000.safetensors"), &bytes).unwrap();
    let pieces: Vec<Value> = (0..2500)
        .map(|_| serde_json::json!({"file": "rank-00000.safetensors"}))
        .collect();
    let index = serde_json::json!({"format": "meshparity-sharded/1", "tensors": {
        "w": {"shape": [n], "dtype": "F32", "shards": pieces}}});
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
    let out = StdCommand::new(assert_cmd::cargo::cargo_bin("meshparity"))
        .current_dir(d.path())
        .args(["compare", "replicas", "replicas"])
        .pre_exec_limit(1 << 31)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Tensors of no elements on both sides.
    let empty = d.path().join("empty.safetensors");
    let header = br#"{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header);
    std::fs::write(&empty, bytes).unwrap();
    let err = stderr_of(
        meshparity(d.path()).args(["compare", "empty.safetensors", "empty.safetensors"]),
        2,
    );
    assert!(err.contains("nothing was compared"), "{err}");
}

/// A program that never ends, under `calibrate`: ended at `--timeout`, recorded as an error,
/// and the sweep finishes.
#[test]
fn calibrate_ends_a_program_that_never_does() {
    let fx = tempfile::tempdir().unwrap();
    let spec = common::harness::command_spec(r#"["-c", "sleep 600"]"#);
    std::fs::write(fx.path().join("spec.toml"), spec).unwrap();
    let t = std::time::Instant::now();
    let out = meshparity(fx.path())
        .args(["calibrate", "spec.toml", "--seeds", "1", "--timeout", "1"])
        .args(["--out", "cal", "-j", "2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("ran past its time limit of 1 s"), "{text}");
}

/// `Command` with an address-space limit for the child.
trait Limited {
    fn pre_exec_limit(&mut self, bytes: u64) -> &mut Self;
}

impl Limited for StdCommand {
    fn pre_exec_limit(&mut self, bytes: u64) -> &mut Self {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit with a local struct, between fork and exec (async-signal-safe).
        unsafe {
            self.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: bytes,
                    rlim_max: bytes,
                };
                libc::setrlimit(libc::RLIMIT_AS, &limit);
                Ok(())
            })
        }
    }
}
