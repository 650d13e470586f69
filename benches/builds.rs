//! This build against another, side by side on any spec: `meshparity run SPEC` with default
//! flags, each run in a fresh directory with a fresh cache (a new user's first run), the two
//! binaries interleaved (baseline, this, baseline, this, …) so both see the same machine; each
//! run's wall time, the medians and their ratio, and whether every job's status and summary
//! agree between the builds (the figures of a change that alters verdicts mean nothing).
//!
//! `MESHPARITY_BASELINE=/path/to/old/meshparity cargo bench --bench builds -- SPEC [ROUNDS]`
//! (default: the quickstart, 3 rounds; `TMPDIR=/dev/shm` measures off the disk).

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_meshparity"));
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let spec = args.next().map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart.toml"),
        |s| std::fs::canonicalize(&s).expect("the spec exists"),
    );
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let baseline = std::env::var_os("MESHPARITY_BASELINE").map(PathBuf::from);
    let mut builds = vec![("this", exe)];
    if let Some(b) = baseline {
        builds.insert(0, ("baseline", b));
    }
    let mut walls: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut verdicts: BTreeMap<&str, BTreeMap<String, String>> = BTreeMap::new();
    for round in 1..=rounds {
        for (name, exe) in &builds {
            let dir = tempfile::tempdir().expect("scratch");
            let (out, wall) = common::timed(
                Command::new(exe)
                    .current_dir(dir.path())
                    .arg("run")
                    .arg(&spec)
                    .args(["--no-progress", "--run-dir", "run"]),
            );
            let line = String::from_utf8_lossy(&out.stdout)
                .lines()
                .find(|l| l.contains("job(s) in"))
                .unwrap_or_default()
                .trim()
                .to_owned();
            println!("round {round} {name:<8} {wall:6.2} s  {line}");
            walls.entry(name).or_default().push(wall);
            verdicts.insert(name, statuses(&dir.path().join("run/results.json")));
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let this = median(&walls["this"]);
    println!("median this build: {this:.2} s");
    if let Some(base) = walls.get("baseline") {
        let base = median(base);
        println!(
            "median baseline:   {base:.2} s; ratio this/baseline {:.2}",
            this / base
        );
        let differ = verdicts["this"]
            .iter()
            .filter(|(job, v)| verdicts["baseline"].get(*job) != Some(v))
            .count();
        println!(
            "jobs whose status or summary differ between the builds: {differ} of {}",
            verdicts["this"].len()
        );
    }
}

/// Each job's status and summary (its reproduce lines cut: they name the run's own paths).
fn statuses(results: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(results).expect("results.json");
    let r: serde_json::Value = serde_json::from_str(&text).expect("results.json parses");
    r["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            let summary = j["summary"].as_str().unwrap_or_default();
            let summary = summary.split(" (reproduce").next().unwrap_or_default();
            let name = j["name"].as_str().unwrap_or_default().to_owned();
            (name, format!("{} {summary}", j["status"]))
        })
        .collect()
}
