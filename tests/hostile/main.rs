//! Hostile input and shared state, on the real binary: inputs that are not regular files,
//! text that is not UTF-8 or not representable in XML, two runs sharing an output directory,
//! a damaged cache, a held or foreign run directory, a torn results log. Nothing may hang,
//! panic, mix results or be judged from bad bytes.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod integrity;

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

const SPEC: &str = concat!(
    r#"
[run]
name = "small"
seed = 7
steps = 2
batch = 4
output = "out"
"#,
    tiny_model!(),
    r#"
[meshes.dp2]
dp = 2

[meshes.tp2]
tp = 2

[[matrix]]
models = ["tiny"]
levels = ["forward", "oracle"]

[mutations]
select = []
"#
);

/// Nothing here may take long; a hang fails the test instead of blocking CI.
const PATIENCE: Duration = Duration::from_secs(120);

fn meshparity(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("meshparity").unwrap();
    c.current_dir(dir)
        .env("NO_COLOR", "1")
        .env("MESHPARITY_NO_SHRINK", "1")
        .env_remove("MESHPARITY_TEST_FAULT")
        .timeout(PATIENCE);
    c
}

fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.toml"), SPEC).unwrap();
    dir
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A one-tensor safetensors file.
fn safetensors(path: &Path) {
    let mut header = br#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#.to_vec();
    while !(8 + header.len()).is_multiple_of(8) {
        header.push(b' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header);
    bytes.extend(1.0f32.to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

fn stderr_of(c: &mut Command, code: i32) -> String {
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{err}");
    err
}

fn results(run_dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(run_dir.join("results.json")).unwrap()).unwrap()
}

fn statuses(r: &Value) -> Vec<String> {
    r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["status"].as_str().unwrap().to_owned())
        .collect()
}

fn run_dirs(out: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("results.json").exists())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn fifos_devices_and_directories_are_refused_at_once() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    for name in [
        "fifo",
        "fifo.toml",
        "fifo.jsonl",
        "fifo.json",
        "shard.safetensors",
    ] {
        mkfifo(&p.join(name));
    }
    safetensors(&p.join("real.safetensors"));
    std::fs::write(p.join("real.jsonl"), "{\"step\": 1, \"loss\": 1.0}\n").unwrap();
    std::fs::write(
        p.join("index.json"),
        r#"{"weight_map": {"w": "shard.safetensors"}}"#,
    )
    .unwrap();
    for (name, include) in [
        ("inc-fifo.toml", "fifo"),
        ("inc-urandom.toml", "/dev/urandom"),
        ("inc-zero.toml", "/dev/zero"),
        ("inc-dir.toml", "."),
    ] {
        std::fs::write(p.join(name), format!("include = [\"{include}\"]\n")).unwrap();
    }
    let cases: &[(&[&str], &str)] = &[
        (&["validate", "fifo.toml"], "FIFO"),
        (&["validate", "inc-fifo.toml"], "inc-fifo.toml:1:12"),
        (&["validate", "inc-urandom.toml"], "character device"),
        (&["validate", "inc-zero.toml"], "character device"),
        (&["validate", "inc-dir.toml"], "directory"),
        (&["compare", "fifo", "real.safetensors"], "FIFO"),
        (&["compare", "real.safetensors", "fifo"], "FIFO"),
        (&["compare", "fifo.jsonl", "real.jsonl"], "FIFO"),
        (&["compare", "real.jsonl", "fifo.jsonl"], "FIFO"),
        (&["compare", "index.json", "real.safetensors"], "FIFO"),
        (&["report", "fifo.json"], "FIFO"),
    ];
    for (args, says) in cases {
        let err = stderr_of(meshparity(p).args(*args), 2);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_spec_that_is_not_utf8_says_where() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("bad.toml"), b"[run]\nname = \"a\xffb\"\n").unwrap();
    let err = stderr_of(meshparity(d.path()).args(["validate", "bad.toml"]), 2);
    assert!(
        err.contains("bad.toml") && err.contains("not UTF-8 at byte 15 (line 2, column 10)"),
        "{err}"
    );
}

#[test]
fn two_runs_into_one_output_directory_keep_separate_correct_results() {
    let fx = fixture();
    let spawn = || {
        StdCommand::new(assert_cmd::cargo::cargo_bin("meshparity"))
            .current_dir(fx.path())
            .env_remove("MESHPARITY_TEST_FAULT")
            .args(["run", "spec.toml", "--no-progress", "-j", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dirs = run_dirs(&fx.path().join("out"));
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    for dir in &dirs {
        let r = results(dir);
        let s = statuses(&r);
        assert_eq!(s.len(), 7, "{r:#}");
        assert!(s.iter().all(|s| s == "passed"), "{r:#}");
        let lines = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
        assert_eq!(lines.lines().count(), 7, "{}", dir.display());
    }
}

#[test]
fn a_damaged_cache_entry_is_recomputed_and_said() {
    let fx = fixture();
    let run = |dir: &str| {
        meshparity(fx.path())
            .args(["run", "spec.toml", "--no-progress", "--run-dir", dir])
            .assert()
            .code(0);
        results(&fx.path().join(dir))
    };
    run("first");
    let cache = fx.path().join("out/cache");
    let entry = |prefix: &str| {
        std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .unwrap()
    };
    // One flipped bit in the reference's initial weights, one truncated mesh file.
    let seed = entry("reference-").join("seed.safetensors");
    let mut bytes = std::fs::read(&seed).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&seed, bytes).unwrap();
    let weights = entry("run-").join("weights.safetensors");
    let len = std::fs::metadata(&weights).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&weights)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let r = run("second");
    let summaries: Vec<&str> = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["summary"].as_str().unwrap())
        .collect();
    let damaged: Vec<&&str> = summaries.iter().filter(|s| s.contains("damaged")).collect();
    assert_eq!(damaged.len(), 2, "{summaries:#?}");
    assert!(damaged.iter().any(|s| s.contains("seed.safetensors")));
    assert!(damaged.iter().any(|s| s.contains("weights.safetensors")));
    // Repaired: the next run reuses every entry.
    let r = run("third");
    assert!(r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["kind"] == "reference" || j["kind"] == "train")
        .all(|j| j["summary"].as_str().unwrap().starts_with("reused")));
}

#[test]
fn a_run_directory_in_use_is_refused_with_its_holders_pid() {
    let fx = fixture();
    let mut holder = StdCommand::new(assert_cmd::cargo::cargo_bin("meshparity"))
        .current_dir(fx.path())
        .env("MESHPARITY_TEST_FAULT", "*=hang")
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "held"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lock = fx.path().join("held/.lock");
    let t = std::time::Instant::now();
    while std::fs::read_to_string(&lock)
        .unwrap_or_default()
        .is_empty()
    {
        assert!(t.elapsed() < PATIENCE, "the first run never took its lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = format!("pid {}", holder.id());
    for args in [&["--resume", "held"][..], &["--run-dir", "held"][..]] {
        let err = stderr_of(
            meshparity(fx.path())
                .args(["run", "spec.toml", "--no-progress"])
                .args(args),
            2,
        );
        assert!(
            err.contains("in use") && err.contains(&pid),
            "{args:?}: {err}"
        );
    }
    // Interrupt only once a job is running: the runner's signal handling is up by then.
    let jobs = fx.path().join("held/jobs");
    let t = std::time::Instant::now();
    while std::fs::read_dir(&jobs).map_or(0, |d| d.count()) == 0 {
        assert!(t.elapsed() < PATIENCE, "no job started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(holder.id() as i32, libc::SIGINT) };
    assert_eq!(holder.wait().unwrap().code(), Some(130));
    // Released when its holder ends, however it ends.
    meshparity(fx.path())
        .env("MESHPARITY_TEST_FAULT", "*=noop")
        .args(["run", "spec.toml", "--no-progress", "--resume", "held"])
        .assert()
        .code(0);
}

#[test]
fn resume_of_another_specs_directory_is_refused_unless_forced() {
    let fx = fixture();
    let run = |extra: &[&str]| {
        let mut c = meshparity(fx.path());
        c.env("MESHPARITY_TEST_FAULT", "*=noop")
            .args(["run", "spec.toml", "--no-progress"])
            .args(extra);
        c
    };
    run(&["--run-dir", "r"]).assert().code(0);
    std::fs::write(
        fx.path().join("spec.toml"),
        SPEC.replace("seed = 7", "seed = 8"),
    )
    .unwrap();
    let err = stderr_of(&mut run(&["--resume", "r"]), 2);
    assert!(
        err.contains("made from another spec") && err.contains("spec.toml` changed"),
        "{err}"
    );
    assert!(err.contains("--resume-force"), "{err}");
    run(&["--resume", "r", "--resume-force"]).assert().code(0);
}

#[test]
fn a_torn_last_results_line_is_cut_before_resume_appends() {
    let fx = fixture();
    let run = |extra: &[&str]| {
        meshparity(fx.path())
            .env("MESHPARITY_TEST_FAULT", "*=noop")
            .args(["run", "spec.toml", "--no-progress"])
            .args(extra)
            .assert()
            .code(0);
    };
    run(&["--run-dir", "r", "-f", "mesh=dp2"]);
    let log = fx.path().join("r/results.jsonl");
    let mut text = std::fs::read(&log).unwrap();
    text.extend_from_slice(b"{\"id\": \"0123\", \"status\": \"pas\xc3");
    std::fs::write(&log, text).unwrap();
    run(&["--resume", "r"]);
    let text = std::fs::read_to_string(&log).unwrap();
    for line in text.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    let r = results(&fx.path().join("r"));
    assert!(statuses(&r).iter().all(|s| s == "passed"), "{r:#}");
}

#[test]
fn reports_stay_valid_xml_whatever_the_names() {
    let d = tempfile::tempdir().unwrap();
    let name = "spec\u{FFFE}\u{FFFF}.toml";
    std::fs::write(d.path().join(name), SPEC).unwrap();
    meshparity(d.path())
        .env("MESHPARITY_TEST_FAULT", "*=noop")
        .args(["run", name, "--no-progress", "--run-dir", "r"])
        .assert()
        .code(0);
    let xml = std::fs::read_to_string(d.path().join("r/junit.xml")).unwrap();
    assert!(!xml.contains('\u{FFFE}') && !xml.contains('\u{FFFF}'));
    assert!(xml.contains("spec\u{FFFD}\u{FFFD}.toml"));
    // A real parser, where the machine has one (CI installs it).
    if let Ok(out) = StdCommand::new("xmllint")
        .args(["--noout", "r/junit.xml"])
        .current_dir(d.path())
        .output()
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn smaller_cli_defects() {
    let fx = fixture();
    let p = fx.path();
    // --max-fail 0 would stop before anything ran and exit 1 with nothing failed.
    let err = stderr_of(
        meshparity(p).args(["run", "spec.toml", "--max-fail", "0"]),
        2,
    );
    assert!(err.contains("--max-fail"), "{err}");
    // --fail-fast names each job it did not run once, not again in the summary.
    let out = meshparity(p)
        .env("MESHPARITY_TEST_FAULT", "*/dp2/forward=exit:1;*=noop")
        .args([
            "run",
            "spec.toml",
            "--no-progress",
            "-j",
            "1",
            "--fail-fast",
        ])
        .args(["--run-dir", "ff"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let not_run = results(&p.join("ff"))["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["status"] == "not-run")
        .map(|j| j["name"].as_str().unwrap().to_owned())
        .expect("a job was not run");
    assert_eq!(text.matches(&format!("{not_run} ")).count(), 1, "{text}");
    // `report --html` writes that file only, leaving the run's own reports alone.
    let junit = std::fs::read(p.join("ff/junit.xml")).unwrap();
    std::fs::write(p.join("ff/junit.xml"), b"kept").unwrap();
    meshparity(p)
        .args(["report", "ff/results.json", "--html", "elsewhere.html"])
        .assert()
        .code(0);
    assert!(p.join("elsewhere.html").exists());
    assert_eq!(std::fs::read(p.join("ff/junit.xml")).unwrap(), b"kept");
    assert!(!junit.is_empty());
    // One spec mistake, one mention.
    std::fs::write(
        p.join("typo.toml"),
        SPEC.replace("hidden = 32", "hiden = 32"),
    )
    .unwrap();
    let err = stderr_of(meshparity(p).args(["validate", "typo.toml"]), 2);
    assert_eq!(err.matches("unknown key `hiden`").count(), 1, "{err}");
    // Help lists the exit codes the command can give, not `run`'s.
    let help = meshparity(p).args(["validate", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("2  usage or spec error"), "{help}");
    assert!(
        !help.contains("130") && !help.contains("infrastructure"),
        "{help}"
    );
}

#[test]
fn a_model_too_large_for_this_machine_is_refused_with_its_estimate() {
    let d = tempfile::tempdir().unwrap();
    let big = SPEC
        .replace("hidden = 32", "hidden = 8192")
        .replace("vocab = 64", "vocab = 128000")
        .replace("ffn = 48", "ffn = 24576");
    std::fs::write(d.path().join("big.toml"), big).unwrap();
    for cmd in ["validate", "run"] {
        let err = stderr_of(meshparity(d.path()).args([cmd, "big.toml"]), 2);
        assert!(
            err.contains("big.toml:")
                && err.contains("GiB of memory")
                && err.contains("this machine has"),
            "{cmd}: {err}"
        );
    }
}
