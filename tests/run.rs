//! `meshparity run` on the real binary: every job in its own process, failures of every kind
//! recorded while the rest of the run completes, retries, interruption, resume, exit codes, and
//! no job process outliving the runner.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use common::jobs::{ignores_sigterm, processes_mentioning, servers, started, wait_for};
use serde_json::Value;

const SPEC: &str = concat!(
    r#"
[run]
name = "small"
seed = 7
steps = 3
batch = 4
"#,
    tiny_model!(),
    r#"
[meshes.dp2]
dp = 2

[meshes.tp2]
tp = 2

[meshes.pp2]
pp = 2
microbatches = 2

[meshes.tp2-sp]
tp = 2
sp = true

[[matrix]]
models = ["tiny"]
levels = ["roundtrip", "forward", "curve"]
"#
);

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new(spec: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn run_dir(&self) -> PathBuf {
        self.path().join("run")
    }

    fn cmd(&self, fault: Option<&str>) -> Command {
        let mut c = Command::cargo_bin("meshparity").unwrap();
        c.current_dir(self.path())
            .env("NO_COLOR", "1")
            .env_remove("MESHPARITY_TEST_FAULT");
        if let Some(f) = fault {
            c.env("MESHPARITY_TEST_FAULT", f);
        }
        c.args(["run", "spec.toml", "--no-progress"]);
        c
    }

    fn results(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.run_dir().join("results.json")).unwrap())
            .unwrap()
    }

    fn status_of(&self, name: &str) -> (String, String) {
        let r = self.results();
        let job = r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == name)
            .unwrap_or_else(|| panic!("no job {name}"));
        (
            job["status"].as_str().unwrap().to_owned(),
            job["summary"].as_str().unwrap().to_owned(),
        )
    }
}

fn count(results: &Value, status: &str) -> usize {
    results["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["status"] == status)
        .count()
}

#[test]
fn a_clean_run_passes_and_writes_results() {
    let fx = Fixture::new(SPEC);
    let out = fx
        .cmd(None)
        .args(["--run-dir", "run"])
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("17 job(s)"), "{out}");
    let r = fx.results();
    assert_eq!(r["format_version"], 1);
    assert_eq!(count(&r, "passed"), 17, "{r:#}");
    assert_eq!(r["meta"]["backend"], "burn-flex");
    let lines = std::fs::read_to_string(fx.run_dir().join("results.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 17);
    for report in ["junit.xml", "report.html", "summary.md"] {
        assert!(
            fx.run_dir().join(report).exists(),
            "{report} written by run"
        );
    }
    // `report` renders them again, elsewhere.
    let mut report = Command::cargo_bin("meshparity").unwrap();
    report
        .current_dir(fx.path())
        .args([
            "report",
            "run/results.json",
            "--html",
            "again.html",
            "--junit",
            "again.xml",
            "--markdown",
            "again.md",
        ])
        .assert()
        .code(0);
    let again = std::fs::read_to_string(fx.path().join("again.html")).unwrap();
    assert!(again.contains("tiny@f32/tp2-sp/curve"));
    assert_eq!(
        std::fs::read_to_string(fx.path().join("again.xml")).unwrap(),
        std::fs::read_to_string(fx.run_dir().join("junit.xml")).unwrap()
    );
    let mut bad = Command::cargo_bin("meshparity").unwrap();
    bad.current_dir(fx.path())
        .args(["report", "spec.toml"])
        .assert()
        .code(2);
    // A second run reuses the cached oracle artifacts.
    fx.cmd(None).args(["--run-dir", "run2"]).assert().code(0);
    let r2: Value =
        serde_json::from_slice(&std::fs::read(fx.path().join("run2/results.json")).unwrap())
            .unwrap();
    let reference = r2["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["kind"] == "reference")
        .unwrap();
    assert_eq!(reference["cached"], true, "{reference:#}");
}

/// The same faults in jobs served by long-lived workers (the default for the built-in engine)
/// and in workers of their own (`MESHPARITY_SERVE=0`): each fails its job alone.
#[test]
fn crashes_hangs_and_bad_exits_are_recorded_while_the_rest_completes() {
    for serve in ["1", "0"] {
        let fx = crashes_hangs_and_bad_exits(serve);
        let servers = servers(&fx.run_dir());
        if serve == "0" {
            assert!(servers.is_empty(), "{servers:?}");
            continue;
        }
        // Served: every job that ran (the reference, 4 trainings, 4 roundtrips, the 4 faulty
        // forwards), job after job in a process, each of the two slots' servers replaced after
        // a job that ended its own.
        assert_eq!(servers.values().sum::<usize>(), 13, "{servers:?}");
        assert!(servers.values().any(|n| *n >= 3), "{servers:?}");
        assert!(servers.len() >= 3, "{servers:?}");
    }
}

fn crashes_hangs_and_bad_exits(serve: &str) -> Fixture {
    let fx = Fixture::new(SPEC);
    let faults =
        "*/dp2/forward=panic;*/tp2/forward=abort;*/pp2/forward=hang;*/tp2-sp/forward=exit:7";
    let out = fx
        .cmd(Some(faults))
        .env("MESHPARITY_SERVE", serve)
        .args([
            "--run-dir",
            "run",
            "--timeout",
            "forward=2",
            "--grace",
            "0.5",
        ])
        .assert()
        .code(3);
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let (s, why) = fx.status_of("tiny@f32/dp2/forward");
    assert_eq!(s, "error");
    assert!(why.contains("injected panic"), "{why}");
    let (s, why) = fx.status_of("tiny@f32/tp2/forward");
    assert_eq!(s, "error");
    assert!(why.contains("signal 6"), "{why}");
    let (s, why) = fx.status_of("tiny@f32/pp2/forward");
    assert_eq!(
        (s.as_str(), why.as_str()),
        ("timeout", "timed out after 2s")
    );
    let (s, why) = fx.status_of("tiny@f32/tp2-sp/forward");
    assert_eq!(s, "error");
    assert!(why.contains("exited with 7"), "{why}");
    // Dependents are skipped with the reason; everything else ran.
    let (s, why) = fx.status_of("tiny@f32/pp2/curve");
    assert_eq!(s, "skipped");
    assert!(why.contains("tiny@f32/pp2/forward"), "{why}");
    let r = fx.results();
    assert_eq!(
        count(&r, "passed"),
        9,
        "reference + 4 trainings + 4 roundtrips: {stdout}"
    );
    let panic_job = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "tiny@f32/dp2/forward")
        .unwrap();
    assert!(panic_job["attempts"][0]["log_tail"]
        .as_str()
        .unwrap()
        .contains("injected panic"));
    assert!(processes_mentioning(&fx.run_dir().display().to_string()).is_empty());
    fx
}

#[test]
fn infrastructure_errors_are_retried_and_reported_flaky() {
    let fx = Fixture::new(SPEC);
    fx.cmd(Some("*/tp2/roundtrip=crash-once"))
        .args(["--run-dir", "run"])
        .assert()
        .code(3);
    assert_eq!(fx.status_of("tiny@f32/tp2/roundtrip").0, "error");

    let fx = Fixture::new(SPEC);
    fx.cmd(Some("*/tp2/roundtrip=crash-once"))
        .args(["--run-dir", "run", "--retries", "1"])
        .assert()
        .code(0);
    let r = fx.results();
    let job = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "tiny@f32/tp2/roundtrip")
        .unwrap();
    assert_eq!(job["status"], "flaky");
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["status"], "error");
    assert_eq!(attempts[1]["status"], "passed");
}

#[test]
fn a_check_failure_exits_1_and_is_never_retried() {
    // Bit-exact forward limits cannot hold for a row-parallel sum.
    let spec = format!("{SPEC}\n[tolerances.exact-forward]\nextends = \"builtin\"\nforward.f32 = {{ atol = 0.0, rtol = 0.0, top1 = 1.0 }}\n");
    let spec = spec.replace(
        "levels = [\"roundtrip\", \"forward\", \"curve\"]",
        "levels = [\"forward\"]\ntolerance = \"exact-forward\"",
    );
    let fx = Fixture::new(&spec);
    fx.cmd(None)
        .args(["--run-dir", "run", "--retries", "2"])
        .assert()
        .code(1);
    let r = fx.results();
    let tp2 = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "tiny@f32/tp2/forward")
        .unwrap();
    assert_eq!(tp2["status"], "failed", "{tp2:#}");
    assert_eq!(tp2["attempts"].as_array().unwrap().len(), 1);
    assert!(
        tp2["summary"].as_str().unwrap().contains("logits"),
        "{tp2:#}"
    );
}

/// A failed level skips the levels after it, unless `--no-skip`: then they are judged too,
/// while the cell's mutations (which need every check to pass) are still skipped.
#[test]
fn no_skip_judges_every_level_after_a_failure() {
    let spec = format!("{SPEC}\n[tolerances.exact-forward]\nextends = \"builtin\"\nforward.f32 = {{ atol = 0.0, rtol = 0.0 }}\n[mutations]\nselect = [\"tp-skip-forward-all-reduce\"]\n");
    let spec = spec.replace(
        "levels = [\"roundtrip\", \"forward\", \"curve\"]",
        "meshes = [\"tp2\"]\nlevels = [\"forward\", \"curve\"]\ntolerance = \"exact-forward\"",
    );
    let fx = Fixture::new(&spec);
    fx.cmd(None).args(["--run-dir", "run"]).assert().code(1);
    assert_eq!(fx.status_of("tiny@f32/tp2/curve").0, "skipped");
    fx.cmd(None)
        .args(["--run-dir", "run", "--force", "--no-skip"])
        .assert()
        .code(1);
    assert_eq!(fx.status_of("tiny@f32/tp2/forward").0, "failed");
    assert_eq!(fx.status_of("tiny@f32/tp2/curve").0, "passed");
    let (status, why) = fx.status_of("tiny@f32/tp2/mutation[tp-skip-forward-all-reduce]");
    assert_eq!(status, "skipped", "{why}");
    assert!(why.contains("a check of its cell before"), "{why}");
}

#[test]
fn usage_spec_and_selection_errors_have_their_own_exit_codes() {
    let fx = Fixture::new(SPEC);
    fx.cmd(None)
        .args(["--filter", "mesh=nope"])
        .assert()
        .code(4);
    let bad = Fixture::new("[run]\nsteps = \"many\"\n");
    bad.cmd(None).assert().code(2);
    fx.cmd(None).args(["--timeout", "forever"]).assert().code(2);
}

fn spawn_run(fx: &Fixture, fault: &str, extra: &[&str]) -> Child {
    let exe = assert_cmd::cargo::cargo_bin("meshparity");
    StdCommand::new(exe)
        .current_dir(fx.path())
        .env("MESHPARITY_TEST_FAULT", fault)
        .args([
            "run",
            "spec.toml",
            "--no-progress",
            "--run-dir",
            "run",
            "-j",
            "1",
        ])
        .args(extra)
        .stdout(Stdio::null())
        // A file, not a pipe nobody reads while the test waits.
        .stderr(std::fs::File::create(fx.path().join("runner.log")).unwrap())
        .spawn()
        .unwrap()
}

fn finished_lines(fx: &Fixture) -> usize {
    std::fs::read_to_string(fx.run_dir().join("results.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn sigint_leaves_valid_results_and_a_resumable_run() {
    let fx = Fixture::new(SPEC);
    let mut child = spawn_run(&fx, "*/tp2/curve=hang", &[]);
    let run_dir = fx.run_dir().display().to_string();
    wait_for("the hanging job", Duration::from_secs(120), || {
        started(&fx.run_dir(), "tp2_curve")
    });
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let r = fx.results();
    assert_eq!(r["meta"]["interrupted"], true);
    assert!(count(&r, "not-run") >= 1, "{r:#}");
    assert!(
        processes_mentioning(&run_dir).is_empty(),
        "job processes survived SIGINT"
    );
    let passed_before = count(&r, "passed");
    let lines_before = finished_lines(&fx);
    // The interrupted run says how to continue.
    let said = std::fs::read_to_string(fx.path().join("runner.log")).unwrap();
    assert!(
        said.contains("continue with `meshparity run spec.toml --resume "),
        "{said}"
    );

    let out = fx.cmd(None).args(["--resume", "run"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let r = fx.results();
    assert_eq!(count(&r, "passed"), 17, "{r:#}");
    // Only what had not passed ran again; what passed before is said to be kept.
    assert_eq!(finished_lines(&fx) - lines_before, 17 - passed_before);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        said.matches("  PASSED     kept  ").count(),
        passed_before,
        "{said}"
    );
}

#[test]
fn kill_9_of_the_runner_loses_no_result_and_leaves_no_process() {
    let fx = Fixture::new(SPEC);
    let mut child = spawn_run(&fx, "*/pp2/curve=hang", &[]);
    let run_dir = fx.run_dir().display().to_string();
    wait_for("some finished results", Duration::from_secs(120), || {
        finished_lines(&fx) >= 5
    });
    wait_for("the hanging job", Duration::from_secs(120), || {
        !processes_mentioning(&run_dir).is_empty()
    });
    let before = finished_lines(&fx);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    wait_for(
        "job processes to die with the runner",
        Duration::from_secs(10),
        || processes_mentioning(&run_dir).is_empty(),
    );
    assert!(finished_lines(&fx) >= before, "finished results were lost");
    fx.cmd(None).args(["--resume", "run"]).assert().code(0);
    assert_eq!(count(&fx.results(), "passed"), 17);
}

#[test]
fn a_job_that_ignores_sigterm_is_killed_after_the_grace_period_or_a_second_interrupt() {
    // Timeout: SIGTERM is ignored, SIGKILL after the grace period ends it.
    let fx = Fixture::new(SPEC);
    fx.cmd(Some("*/tp2/forward=hang-ignore-term"))
        .args([
            "--run-dir",
            "run",
            "--timeout",
            "forward=1",
            "--grace",
            "0.5",
            "-f",
            "mesh=tp2",
        ])
        .assert()
        .code(3);
    assert_eq!(fx.status_of("tiny@f32/tp2/forward").0, "timeout");

    // Interrupt: the first SIGINT waits out the grace period, a second one kills at once.
    let fx = Fixture::new(SPEC);
    let mut child = spawn_run(&fx, "*/tp2/forward=hang-ignore-term", &["--grace", "600"]);
    let run_dir = fx.run_dir().display().to_string();
    wait_for("the stubborn job", Duration::from_secs(120), || {
        ignores_sigterm(&run_dir)
    });
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the runner waits for the grace period"
    );
    let start = Instant::now();
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "a second interrupt kills at once"
    );
    assert!(
        processes_mentioning(&run_dir).is_empty(),
        "no job process survives"
    );
    assert_eq!(fx.results()["meta"]["interrupted"], true);
}
