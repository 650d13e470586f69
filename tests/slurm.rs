//! The Slurm executor on a real cluster (`.ci/slurm-up` starts a one-node one): the quickstart
//! with the same verdicts as the local executor and every job a Slurm job, a failing check, a
//! job over its time limit, a cancelled run, and a runner killed with -9 then resumed.
//!
//! Without Slurm's client on PATH these tests say so and pass, except under CI (`CI` set),
//! where a missing cluster is a failure: `.ci/run` starts one.

#[macro_use]
mod common;

use common::slurm::cluster;

use std::path::Path;
use std::process::{Child, Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;

const SPEC: &str = concat!(
    r#"
[run]
name = "slurm"
seed = 11
steps = 2
batch = 4
"#,
    tiny_model!(),
    r#"
[meshes.dp2]
dp = 2

[meshes.tp2]
tp = 2

[[matrix]]
models = ["tiny"]
levels = ["forward"]

[mutations]
select = []
"#
);

fn meshparity(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("meshparity").unwrap();
    c.current_dir(dir)
        .env("NO_COLOR", "1")
        .env("MESHPARITY_NO_SHRINK", "1")
        .env_remove("MESHPARITY_TEST_FAULT")
        .timeout(Duration::from_secs(300));
    c
}

fn results(run_dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(run_dir.join("results.json")).unwrap()).unwrap()
}

fn verdicts(r: &Value) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["name"].as_str().unwrap().to_owned(),
                j["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The Slurm job ids `r`'s attempts ran as (each attempt directory records its own; the
/// records name them relative to the run directory `run_dir`).
fn slurm_ids(run_dir: &Path, r: &Value) -> Vec<String> {
    r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|j| j["attempts"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a["dir"].as_str().map(str::to_owned))
        .filter_map(|d| std::fs::read_to_string(run_dir.join(d).join("slurm-job")).ok())
        .map(|id| id.trim().to_owned())
        .collect()
}

/// Slurm's completion log: (id, state) of each of `ids` it holds.
fn sacct(ids: &[String]) -> Vec<(String, String)> {
    // `sacct -j ""` lists every job on the cluster: an empty list is the helper's bug.
    assert!(!ids.is_empty(), "no Slurm job ids to look up");
    let out = StdCommand::new("sacct")
        .args(["-c", "-P", "-n", "-o", "JobID,State", "-j", &ids.join(",")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('|'))
        .filter(|(id, _)| ids.iter().any(|i| i == id))
        .map(|(n, s)| (n.to_owned(), s.to_owned()))
        .collect()
}

fn squeue_mine(run_dir: &Path) -> usize {
    let out = StdCommand::new("squeue")
        .args(["-h", "-o", "%i %o"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&*run_dir.to_string_lossy()))
        .count()
}

#[test]
fn the_quickstart_on_slurm_gives_the_local_verdicts_and_every_job_is_a_slurm_job() {
    let Some(_cluster) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let spec = std::fs::read_to_string("examples/quickstart.toml").unwrap();
    std::fs::write(dir.path().join("quickstart.toml"), spec).unwrap();
    let run = |executor: &str| {
        meshparity(dir.path())
            .args([
                "run",
                "quickstart.toml",
                "--no-progress",
                "--executor",
                executor,
            ])
            .args(["--run-dir", executor])
            .assert()
            .code(0);
        results(&dir.path().join(executor))
    };
    let local = run("local");
    let slurm = run("slurm");
    assert_eq!(verdicts(&local), verdicts(&slurm));
    let jobs = slurm["jobs"].as_array().unwrap().len();
    let ids = slurm_ids(&dir.path().join("slurm"), &slurm);
    assert_eq!(ids.len(), jobs, "one Slurm job per job: {ids:?}");
    let seen = sacct(&ids);
    assert_eq!(seen.len(), jobs, "{seen:?}");
    assert!(seen.iter().all(|(_, s)| s == "COMPLETED"), "{seen:?}");
}

#[test]
fn failures_and_time_limits_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    // An impossible limit makes dp2's forward check fail for real; tp2's forward hangs past
    // its 5 s timeout, which the runner enforces with `scancel` (Slurm's own `--time` is whole
    // minutes, checked every 30 s: 60–90 s).
    let spec = format!(
        "{SPEC}\n[tolerances.impossible]\nextends = \"builtin\"\n\
         forward.f32 = {{ relative_l2 = 1e-30 }}\n"
    )
    .replace(
        "levels = [\"forward\"]",
        "levels = [\"forward\"]\ntolerance = \"impossible\"",
    );
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    meshparity(dir.path())
        .env("MESHPARITY_TEST_FAULT", "*/tp2/forward=hang")
        .args(["run", "spec.toml", "--no-progress", "--executor", "slurm"])
        .args(["--run-dir", "r", "--timeout", "forward=5"])
        .assert()
        .code(1);
    let r = results(&dir.path().join("r"));
    let v = verdicts(&r);
    let status = |name: &str| v.iter().find(|(n, _)| n == name).unwrap().1.clone();
    assert_eq!(status("tiny@f32/dp2/forward"), "failed", "{v:?}");
    assert_eq!(status("tiny@f32/tp2/forward"), "timeout", "{v:?}");
    // Ended by its own 5 s, not early and not at Slurm's minute (60-90 s): the attempt's time
    // runs from its submission, so it is at least the limit.
    let hung = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "tiny@f32/tp2/forward")
        .unwrap();
    let took = hung["seconds"].as_f64().unwrap();
    assert!(
        (5.0..40.0).contains(&took),
        "a 5 s timeout took {took} s: {hung:#}"
    );
    assert_eq!(status("tiny@f32/reference"), "passed", "{v:?}");
    let seen = sacct(&slurm_ids(&dir.path().join("r"), &r));
    // The runner's scancel, which Slurm may record before or after its own limit.
    assert!(
        seen.iter()
            .any(|(_, s)| s.starts_with("CANCELLED") || s == "TIMEOUT"),
        "{seen:?}"
    );
    assert!(seen.iter().any(|(_, s)| s == "FAILED"), "{seen:?}");
}

fn spawn_run(dir: &Path, fault: &str) -> Child {
    StdCommand::new(assert_cmd::cargo::cargo_bin("meshparity"))
        .current_dir(dir)
        .env("MESHPARITY_TEST_FAULT", fault)
        .args(["run", "spec.toml", "--no-progress", "--executor", "slurm"])
        .args(["--run-dir", "r"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "waited too long for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_cancelled_run_cancels_every_job_and_resumes() {
    let Some(_cluster) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.toml"), SPEC).unwrap();
    let run_dir = dir.path().join("r");
    let mut runner = spawn_run(dir.path(), "*/train=hang");
    wait_until("both trainings on the cluster", || {
        squeue_mine(&run_dir) >= 2
    });
    unsafe { libc::kill(runner.id() as i32, libc::SIGINT) };
    assert_eq!(runner.wait().unwrap().code(), Some(130));
    assert_eq!(squeue_mine(&run_dir), 0, "jobs left on the cluster");
    let r = results(&run_dir);
    assert!(verdicts(&r).iter().any(|(_, s)| s == "not-run"), "{r:#}");
    let cancelled = sacct(&slurm_ids(&run_dir, &r));
    assert!(
        cancelled.iter().any(|(_, s)| s.starts_with("CANCELLED")),
        "{cancelled:?}"
    );
    meshparity(dir.path())
        .args(["run", "spec.toml", "--no-progress", "--executor", "slurm"])
        .args(["--resume", "r"])
        .assert()
        .code(0);
    assert!(verdicts(&results(&run_dir))
        .iter()
        .all(|(_, s)| s == "passed"));
}

#[test]
fn a_runner_killed_with_9_resumes_and_adopts_the_jobs_still_on_the_cluster() {
    let Some(_cluster) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.toml"), SPEC).unwrap();
    let run_dir = dir.path().join("r");
    // The trainings take a few seconds; the runner dies while they run.
    let mut runner = spawn_run(dir.path(), "*/train=sleep:4");
    wait_until("both trainings on the cluster", || {
        squeue_mine(&run_dir) >= 2
    });
    unsafe { libc::kill(runner.id() as i32, libc::SIGKILL) };
    runner.wait().unwrap();
    assert!(
        squeue_mine(&run_dir) >= 1,
        "the cluster kept running the jobs"
    );
    let submitted: Vec<String> = glob_ids(&run_dir);
    meshparity(dir.path())
        .args(["run", "spec.toml", "--no-progress", "--executor", "slurm"])
        .args(["--resume", "r"])
        .assert()
        .code(0);
    let r = results(&run_dir);
    assert!(verdicts(&r).iter().all(|(_, s)| s == "passed"), "{r:#}");
    // Adopted, not submitted again: the trainings kept their Slurm jobs, one per job.
    let ids = slurm_ids(&run_dir, &r);
    for id in &submitted {
        assert!(ids.contains(id), "job {id} was submitted again: {ids:?}");
    }
    assert_eq!(ids.len(), r["jobs"].as_array().unwrap().len(), "{ids:?}");
    assert!(sacct(&ids).iter().all(|(_, s)| s == "COMPLETED"));
}

/// Every Slurm job id recorded under `run_dir` so far.
fn glob_ids(run_dir: &Path) -> Vec<String> {
    let mut ids = Vec::new();
    for job in std::fs::read_dir(run_dir.join("jobs")).unwrap() {
        for attempt in std::fs::read_dir(job.unwrap().path()).unwrap() {
            if let Ok(id) = std::fs::read_to_string(attempt.unwrap().path().join("slurm-job")) {
                ids.push(id.trim().to_owned());
            }
        }
    }
    ids
}

/// A node failure is the cluster's fault, not the job's: with `--retries` the job runs again
/// and is reported flaky, with the NODE_FAIL in its first attempt.
#[test]
fn a_node_failure_is_retried_and_reported_flaky() {
    let Some(_cluster) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        SPEC.replace("[meshes.tp2]\ntp = 2\n", ""),
    )
    .unwrap();
    let run_dir = dir.path().join("r");
    let host = String::from_utf8(
        StdCommand::new("hostname")
            .arg("-s")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    let mut runner = StdCommand::new(assert_cmd::cargo::cargo_bin("meshparity"))
        .current_dir(dir.path())
        .env("MESHPARITY_TEST_FAULT", "*/train=sleep:8")
        .args(["run", "spec.toml", "--no-progress", "--executor", "slurm"])
        .args([
            "--run-dir",
            "r",
            "--retries",
            "1",
            "--sbatch-arg=--no-requeue",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = || {
        let out = StdCommand::new("squeue")
            .args(["-h", "-t", "R", "-o", "%o"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("train")
    };
    wait_until("the training running", running);
    let node = |state: &str| {
        StdCommand::new("scontrol")
            .args([
                "update",
                &format!("NodeName={host}"),
                &format!("State={state}"),
            ])
            .args(["Reason=meshparity-test"])
            .output()
            .unwrap();
    };
    node("DOWN");
    std::thread::sleep(Duration::from_secs(2));
    node("RESUME");
    wait_until("the node back", || {
        let out = StdCommand::new("sinfo")
            .args(["-h", "-o", "%T"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .starts_with("idle")
            || String::from_utf8_lossy(&out.stdout).contains("mix")
            || String::from_utf8_lossy(&out.stdout).contains("alloc")
    });
    assert_eq!(runner.wait().unwrap().code(), Some(0));
    let r = results(&run_dir);
    let train = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["kind"] == "train")
        .unwrap();
    assert_eq!(train["status"], "flaky", "{train:#}");
    let first = &train["attempts"][0];
    assert_eq!(first["status"], "error", "{train:#}");
    let log: Vec<String> = sacct(&slurm_ids(&run_dir, &r))
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert!(log.iter().any(|s| s == "NODE_FAIL"), "{log:?}");
}

/// A user's program that runs its ranks with `srun` inside its job: `[executor] tasks =
/// "per-rank"` gives the job one task per rank, so `srun -n WORLD` can start them; the program
/// (the numpy trainer of tests/consumers) is then judged as on the local executor.
#[test]
fn a_program_launching_its_ranks_with_srun_gets_a_task_per_rank() {
    let Some(_cluster) = cluster() else { return };
    if !common::numpy() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    // srun starts WORLD ranks (each proves it has a task: `true`), then the trainer runs.
    let spec = format!(
        r#"[run]
name = "srun"
seed = 3
steps = 2
batch = 2

[executor]
kind = "slurm"
tasks = "per-rank"

[engines.prog]
kind = "command"
program = "sh"
args = ["-c", "echo $SLURM_NTASKS > {{{{out_dir}}}}/ntasks && srun -n {{{{world_size}}}} true && exec python3 {trainer} --dp {{{{dp}}}} --seed {{{{seed}}}} --steps {{{{steps}}}} --out {{{{out_dir}}}}"]
env = {{ PYTHONPATH = "{python}" }}
artifacts = {{ curve = "metrics.jsonl", logits = "logits.safetensors", grads = "grads.safetensors", weights = "final.safetensors", initial = "init.safetensors" }}

[models.m]
engine = "prog"

[meshes.dp2]
dp = 2

[[matrix]]
models = ["m"]
levels = ["forward"]
"#,
        trainer = root.join("tests/consumers/hooks_trainer.py").display(),
        python = root.join("python").display(),
    );
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    meshparity(dir.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "r"])
        .assert()
        .code(0);
    let r = results(&dir.path().join("r"));
    assert!(verdicts(&r).iter().all(|(_, s)| s == "passed"), "{r:#}");
    let ntasks: Vec<String> = walk_files(&dir.path().join("r"), "ntasks");
    assert!(
        ntasks.iter().any(|n| n == "2"),
        "the mesh job had {ntasks:?} task(s)"
    );
}

/// The trimmed contents of every file named `name` under `dir`.
fn walk_files(dir: &Path, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|f| f == name) {
                out.push(
                    std::fs::read_to_string(&p)
                        .unwrap_or_default()
                        .trim()
                        .to_owned(),
                );
            }
        }
    }
    out
}

/// `--fail-fast` on a cluster: the first failure cancels every other submitted job, running
/// ones included, instead of leaving them to hold their allocations.
#[test]
fn fail_fast_cancels_the_jobs_still_on_the_cluster() {
    let Some(_cluster) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.toml"), SPEC).unwrap();
    let run_dir = dir.path().join("r");
    let start = Instant::now();
    meshparity(dir.path())
        .env(
            "MESHPARITY_TEST_FAULT",
            "*/dp2/train=sleep:2;*/dp2/forward=exit:1;*/tp2/train=hang",
        )
        .args(["run", "spec.toml", "--no-progress", "--executor", "slurm"])
        .args(["--run-dir", "r", "--fail-fast"])
        .assert()
        .code(3);
    assert!(
        start.elapsed() < Duration::from_secs(90),
        "the hanging job was waited for"
    );
    assert_eq!(squeue_mine(&run_dir), 0, "jobs left on the cluster");
    let r = results(&run_dir);
    let v = verdicts(&r);
    let status = |name: &str| v.iter().find(|(n, _)| n == name).unwrap().1.clone();
    assert_eq!(status("tiny@f32/dp2/forward"), "error", "{v:?}");
    assert_eq!(status("tiny@f32/tp2/train"), "not-run", "{v:?}");
}
