//! The scheduler's own cost per job, process spawn included: `meshparity run` over a large
//! plan whose jobs are no-ops (the test fault `noop`), side by side in one run with the floor of
//! spawning the same binary as many times (`meshparity --version`, one after another and
//! `-j` at a time). Target: under 5 ms per job.
//!
//! `cargo bench --bench run_overhead`

#[path = "common/mod.rs"]
mod common;

use std::process::Command;
use std::time::Instant;

const SPEC: &str = r#"
[run]
name = "overhead"

[models.a]
family = "llama"
[models.b]
family = "llama"
layers = 4

[meshes.dp2]
dp = 2
[meshes.tp2]
tp = 2
[meshes.tp2-sp]
tp = 2
sp = true
[meshes.pp2]
pp = 2
microbatches = 4
[meshes.dp2-tp2-pp2]
dp = 2
tp = 2
pp = 2
microbatches = 2

[[matrix]]
models = ["a", "b"]
dtypes = ["f32", "bf16", "f64"]
levels = ["roundtrip", "forward", "curve", "oracle"]

[mutations]
select = ["all"]
"#;

fn main() {
    let exe = env!("CARGO_BIN_EXE_meshparity");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.toml"), SPEC).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{:<44} {:>6} {:>9} {:>11}",
        "", "jobs", "wall s", "ms per job"
    );
    for (i, jobs) in [1, cores].into_iter().enumerate() {
        let run_dir = dir.path().join(format!("run{i}"));
        let (_, wall) = common::timed(
            Command::new(exe)
                .current_dir(dir.path())
                .env("MESHPARITY_TEST_FAULT", "*=noop")
                .args([
                    "run",
                    "spec.toml",
                    "--no-progress",
                    "-j",
                    &jobs.to_string(),
                    "--run-dir",
                ])
                .arg(&run_dir),
        );
        let results: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run_dir.join("results.json")).unwrap()).unwrap();
        let n = results["jobs"].as_array().unwrap().len();
        println!(
            "{:<44} {n:>6} {wall:>9.2} {:>11.2}",
            format!("meshparity run, no-op jobs, -j {jobs}"),
            wall * 1e3 / n as f64
        );

        // The floor: the same number of processes of the same binary, `jobs` at a time.
        let start = Instant::now();
        let mut left = n;
        while left > 0 {
            let batch = left.min(jobs);
            let children: Vec<_> = (0..batch)
                .map(|_| {
                    Command::new(exe)
                        .arg("--version")
                        .stdout(std::process::Stdio::null())
                        .spawn()
                        .unwrap()
                })
                .collect();
            for mut c in children {
                c.wait().unwrap();
            }
            left -= batch;
        }
        let floor = start.elapsed().as_secs_f64();
        println!(
            "{:<44} {n:>6} {floor:>9.2} {:>11.2}",
            format!("spawn floor: `meshparity --version`, {jobs} at a time"),
            floor * 1e3 / n as f64
        );
    }
}
