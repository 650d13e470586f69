//! The scheduler at sweep scale: `meshparity run -j 2` over plans of about 1,000, 10,000 and
//! 100,000 no-op jobs (the test fault `noop`: each job is a real worker process that starts
//! from its job file and writes its result without computing), side by side in one run. Per
//! job it reports the wall time including the process spawn, and the reports' sizes; the
//! target is flat per-job cost, under 3 ms at -j 2.
//!
//! `cargo bench --bench scale` (all three sizes, ~10 minutes on two cores);
//! `MESHPARITY_SCALE=1000,10000 cargo bench --bench scale` for fewer.

#[path = "common/mod.rs"]
mod common;

use std::process::Command;

/// A spec of `models` models × 5 meshes × 3 dtypes × every level and mutation: 138 jobs each.
fn spec(models: usize) -> String {
    let mut out = String::from("[run]\nname = \"scale\"\n");
    for i in 0..models {
        // Distinct configurations, so every model has its own reference job.
        out.push_str(&format!(
            "[models.m{i}]\nfamily = \"llama\"\nlayers = 2\nhidden = 32\nheads = 4\n\
             kv_heads = 2\nffn = {}\nvocab = 64\nseq_len = 8\n",
            48 + 2 * i
        ));
    }
    out.push_str(
        "[meshes.dp2]\ndp = 2\n[meshes.tp2]\ntp = 2\n[meshes.tp2-sp]\ntp = 2\nsp = true\n\
         [meshes.pp2]\npp = 2\nmicrobatches = 4\n\
         [meshes.dp2-tp2-pp2]\ndp = 2\ntp = 2\npp = 2\nmicrobatches = 2\n\
         [[matrix]]\ndtypes = [\"f32\", \"bf16\", \"f64\"]\n\
         levels = [\"roundtrip\", \"forward\", \"curve\", \"oracle\"]\n\
         [mutations]\nselect = [\"all\"]\n",
    );
    out
}

fn main() {
    let exe = env!("CARGO_BIN_EXE_meshparity");
    let sizes: Vec<usize> = std::env::var("MESHPARITY_SCALE")
        .unwrap_or_else(|_| "1000,10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    println!(
        "{:>8} {:>9} {:>11} {:>12} {:>12} {:>12}",
        "jobs", "wall s", "ms per job", "results MB", "junit MB", "html MB"
    );
    for target in sizes {
        let models = target.div_ceil(138);
        let path = dir.path().join(format!("scale-{target}.toml"));
        std::fs::write(&path, spec(models)).unwrap();
        let run_dir = dir.path().join(format!("run-{target}"));
        let (_, wall) = common::timed(
            Command::new(exe)
                .current_dir(dir.path())
                .env("MESHPARITY_TEST_FAULT", "*=noop")
                .args(["run", "--no-progress", "-j", "2", "--run-dir"])
                .arg(&run_dir)
                .arg(&path),
        );
        let size =
            |f: &str| std::fs::metadata(run_dir.join(f)).map_or(0.0, |m| m.len() as f64 / 1e6);
        let jobs = std::fs::read_to_string(run_dir.join("results.jsonl"))
            .unwrap()
            .lines()
            .count();
        println!(
            "{jobs:>8} {wall:>9.1} {:>11.2} {:>12.1} {:>12.1} {:>12.2}",
            wall * 1e3 / jobs as f64,
            size("results.json"),
            size("junit.xml"),
            size("report.html"),
        );
        // Each run's directory holds a job directory per job: free it before the next size.
        let _ = std::fs::remove_dir_all(&run_dir);
    }
}
