//! Served workers against a worker process per job, side by side in one run: the quickstart
//! (the README's first command: 110 jobs of the built-in engine on the CPU) run with
//! `MESHPARITY_SERVE=0` (every job a process of its own) and with serving on (the default: job
//! after job in long-lived `meshparity serve` processes), interleaved, each on a fresh cache.
//! Prints each run's wall time, the medians and their ratio, and the mean seconds of a job of
//! each kind as the runner measured them.
//!
//! `cargo bench --bench serving [-- REPS]` (default 3 of each)

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::process::Command;

fn main() {
    let exe = env!("CARGO_BIN_EXE_meshparity");
    let spec = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart.toml");
    let reps: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let arms = [("a process per job", "0"), ("served", "1")];
    let mut walls: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut kinds: BTreeMap<(&str, String), (f64, usize)> = BTreeMap::new();
    println!("{:<20} {:>4} {:>6} {:>8}", "", "rep", "jobs", "wall s");
    for rep in 0..reps {
        for (arm, serve) in arms {
            let work = dir.path().join(format!("{serve}-{rep}"));
            std::fs::create_dir_all(&work).unwrap();
            let (_, wall) = common::timed(
                Command::new(exe)
                    .current_dir(&work)
                    .env("MESHPARITY_SERVE", serve)
                    .env_remove("MESHPARITY_TEST_FAULT")
                    .args(["run", spec, "--no-progress", "--run-dir", "run"]),
            );
            let results: serde_json::Value = serde_json::from_slice(
                &std::fs::read(work.join("run").join("results.json")).unwrap(),
            )
            .unwrap();
            let jobs = results["jobs"].as_array().unwrap();
            for j in jobs {
                let e = kinds
                    .entry((arm, j["kind"].as_str().unwrap_or("?").to_owned()))
                    .or_default();
                e.0 += j["seconds"].as_f64().unwrap_or(0.0);
                e.1 += 1;
            }
            println!("{arm:<20} {rep:>4} {:>6} {wall:>8.2}", jobs.len());
            walls.entry(arm).or_default().push(wall);
            // Each run starts from nothing: no reference in a cache, no run directory.
            std::fs::remove_dir_all(&work).unwrap();
        }
    }
    let median = |arm: &str| {
        let mut v = walls[arm].clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (own, served) = (median(arms[0].0), median(arms[1].0));
    println!(
        "median wall: {own:.2} s a process per job, {served:.2} s served: ratio {:.2}",
        served / own
    );
    println!("{:<20} {:<10} {:>12}", "", "kind", "mean job ms");
    for ((arm, kind), (seconds, n)) in &kinds {
        println!("{arm:<20} {kind:<10} {:>12.1}", seconds * 1e3 / *n as f64);
    }
}
