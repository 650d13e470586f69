//! The GPU backend end to end: the quickstart on `--device gpu`, every level and every mutation
//! passing with the GPU tolerance table, and the device recorded for every job.
//!
//! Built only with `--features gpu` (CI: `cargo test --profile ci-gpu --features gpu --test
//! gpu`, on Mesa's software adapter when the machine has no GPU).
#![cfg(feature = "gpu")]

use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

fn meshparity() -> Command {
    let mut c = Command::cargo_bin("meshparity").unwrap();
    c.env("NO_COLOR", "1").env("MESHPARITY_NO_SHRINK", "1");
    c
}

/// `meshparity run SPEC ARGS --no-progress --run-dir RUN`: the exit code, everything the run
/// printed, and its results.json.
fn run(spec: &Path, args: &[&str], run: &Path) -> (Option<i32>, String, Value) {
    let out = meshparity()
        .arg("run")
        .arg(spec)
        .args(args)
        .args(["--no-progress", "--run-dir"])
        .arg(run)
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let results =
        serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    (out.status.code(), log, results)
}

/// The first GPU adapter, as `list devices` reports it.
fn first_gpu() -> Value {
    let out = meshparity()
        .args(["list", "devices", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["gpu_backend_built"], true);
    let gpu = v["devices"][1].clone();
    assert_eq!(
        gpu["device"], "gpu",
        "no Vulkan adapter on this machine (install mesa-vulkan-drivers): {v}"
    );
    gpu
}

#[test]
fn the_quickstart_passes_on_the_gpu_with_the_gpu_table() {
    let gpu = first_gpu();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let quickstart = Path::new("examples/quickstart.toml");
    // Every level on every mesh; every mutation once: all of dp2-tp2-pp2's (dp, tp, pp,
    // microbatches) and the two only sequence parallelism has on tp2-sp. The other meshes'
    // mutations repeat those bugs on fewer dimensions: on the software adapter they added 60%
    // to the test's time and no code path (tp2-sp's other 16 until 2026-12-02, when a fresh
    // clone's `.ci/run` took ~75 minutes against its 45).
    let once = "not (level=mutation and (mesh=dp2,tp2,pp2 or (mesh=tp2-sp and not \
                mutation=sp-all-gather-as-all-reduce,sp-skip-norm-grad-all-reduce)))";
    let (code, log, r) = run(quickstart, &["--device", "gpu", "-f", once], &dir);
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(r["meta"]["backend"], "burn-wgpu");
    let name = gpu["name"].as_str().unwrap();
    assert!(
        r["meta"]["device"].as_str().unwrap().contains(name),
        "{}",
        r["meta"]
    );
    let jobs = r["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 55);
    let mut mutations = std::collections::BTreeSet::new();
    for j in jobs {
        assert_eq!(j["status"], "passed", "{j}");
        assert_eq!(j["device"], "gpu", "{j}");
        assert!(j["adapter"].as_str().unwrap().contains(name), "{j}");
        assert!(j["reproduce"].as_str().unwrap().contains("--device gpu"));
        if j["kind"] == "mutation" {
            mutations.insert(j["detail"]["mutation"].as_str().unwrap().to_owned());
            assert!(
                !j["detail"]["caught_by"].as_array().unwrap().is_empty(),
                "{j}"
            );
            assert_eq!(j["detail"]["localized_as_injected"], true, "{j}");
        }
    }
    // Every dense mutation in the catalog that applies to the quickstart's meshes.
    assert_eq!(mutations.len(), 29, "{mutations:?}");
    // One worker process served every job, one after another (the one GPU slot): one device
    // setup for all 55.
    let served: Vec<(u64, u32)> = jobs.iter().map(|j| served_by(&dir, j)).collect();
    let pids: std::collections::BTreeSet<u32> = served.iter().map(|s| s.1).collect();
    assert_eq!(pids.len(), 1, "{served:?}");
    let mut counts: Vec<u64> = served.iter().map(|s| s.0).collect();
    counts.sort();
    assert_eq!(counts, (1..=55).collect::<Vec<u64>>());
    // The JUnit and HTML reports name the adapter too.
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(junit.contains(r#"name="device" value="gpu""#));
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains(name));
}

/// `(K, PID)` of the line "served: job K of worker process PID" in the job's last attempt's
/// stdout.log (its directory relative to the run directory `run` where it is under it).
fn served_by(run: &Path, job: &Value) -> (u64, u32) {
    let dir = job["attempts"].as_array().unwrap().last().unwrap()["dir"]
        .as_str()
        .unwrap();
    let log = std::fs::read_to_string(run.join(dir).join("stdout.log")).unwrap();
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("served: job "))
        .unwrap_or_else(|| panic!("{} was not served: {log}", job["name"]));
    let (k, pid) = line.split_once(" of worker process ").unwrap();
    (k.parse().unwrap(), pid.parse().unwrap())
}

/// A job that crashes its serving worker fails alone, as in a worker of its own: its attempt
/// records the abort, the retry and every job after it run in a new worker process.
#[test]
fn a_job_that_crashes_its_serving_worker_is_retried_in_a_new_one() {
    first_gpu();
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("crash.toml");
    std::fs::write(
        &spec,
        "[run]\nsteps = 2\nbatch = 4\n[models.m]\ndevice = \"gpu\"\nlayers = 1\nhidden = 32\n\
         heads = 4\nffn = 48\nvocab = 64\nseq_len = 8\n[meshes.tp2]\ntp = 2\n\
         [[matrix]]\nlevels = [\"forward\", \"oracle\"]\n",
    )
    .unwrap();
    let out = meshparity()
        .env("MESHPARITY_TEST_FAULT", "*tp2/train=crash-once")
        .arg("run")
        .arg(&spec)
        .args([
            "-f",
            "not level=mutation",
            "--retries",
            "1",
            "--no-progress",
        ])
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    let r: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run/results.json")).unwrap())
            .unwrap();
    let jobs = r["jobs"].as_array().unwrap();
    let train = jobs.iter().find(|j| j["kind"] == "train").unwrap();
    assert_eq!(train["status"], "flaky", "{train}");
    let first = &train["attempts"][0];
    assert_eq!(first["status"], "error", "{first}");
    assert_eq!(first["exit"], "signal 6", "{first}");
    // The reference before the crash in one worker; the retry and the levels after it in another.
    let reference = jobs.iter().find(|j| j["kind"] == "reference").unwrap();
    let run = dir.path().join("run");
    let (_, before) = served_by(&run, reference);
    let (k, after) = served_by(&run, train);
    assert_ne!(before, after);
    assert_eq!(k, 1, "the retry is its new worker's first job");
    for j in jobs
        .iter()
        .filter(|j| j["kind"] == "forward" || j["kind"] == "oracle")
    {
        assert_eq!(served_by(&run, j).1, after, "{j}");
    }
}

#[test]
fn cpu_and_gpu_models_run_side_by_side_each_against_its_own_oracle() {
    first_gpu();
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("mixed.toml");
    std::fs::write(
        &spec,
        r#"
[run]
name = "mixed"
steps = 2
batch = 4

[models.cpu-model]
layers = 1
hidden = 32
heads = 4
ffn = 48
vocab = 64
seq_len = 8

[models.gpu-model]
device = "gpu"
layers = 1
hidden = 32
heads = 4
ffn = 48
vocab = 64
seq_len = 8

[meshes.tp2]
tp = 2

[[matrix]]
levels = ["forward", "oracle"]

[mutations]
select = ["tp-skip-forward-all-reduce"]
"#,
    )
    .unwrap();
    let (code, log, r) = run(&spec, &["-j", "2"], &dir.path().join("run"));
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(r["meta"]["backend"], "burn-flex + burn-wgpu");
    let jobs = r["jobs"].as_array().unwrap();
    // Two references: equal configs on different devices do not share an oracle.
    assert_eq!(jobs.iter().filter(|j| j["kind"] == "reference").count(), 2);
    for j in jobs {
        let want = if j["model"] == "gpu-model" {
            "gpu"
        } else {
            "cpu"
        };
        assert_eq!(j["device"], want, "{j}");
        assert_eq!(j["status"], "passed", "{j}");
    }
}

#[test]
fn a_dtype_the_adapter_lacks_is_an_error_that_says_so() {
    let gpu = first_gpu();
    if gpu["api"] != "gl" {
        // Vulkan adapters may have f64 kernels; WGSL/GLSL ones never do.
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("f64.toml");
    std::fs::write(
        &spec,
        "[run]\ndtype = \"f64\"\nsteps = 2\nbatch = 4\n[models.m]\nlayers = 1\nhidden = 32\n\
         heads = 4\nffn = 48\nvocab = 64\nseq_len = 8\n[meshes.tp2]\ntp = 2\n\
         [[matrix]]\nlevels = [\"forward\"]\n",
    )
    .unwrap();
    let (code, log, r) = run(&spec, &["--device", "gpu"], &dir.path().join("run"));
    assert_eq!(code, Some(3), "{log}");
    let summary = r["jobs"][0]["summary"].as_str().unwrap();
    assert!(summary.contains("has no f64 kernels"), "{summary}");
    // The mesh's training starts beside its reference (a dense model) and says the same; the
    // level after them is skipped.
    let train = &r["jobs"][1];
    assert_eq!(train["status"], "error", "{train}");
    let summary = train["summary"].as_str().unwrap();
    assert!(summary.contains("has no f64 kernels"), "{summary}");
    assert_eq!(r["jobs"][2]["status"], "skipped");
}
