//! Issue 14's yardstick: the 4-mesh run of a llama with hidden 512, 4 layers, vocab 4096,
//! seq 128 (dp2, tp2, pp2, dp2·tp2·pp2; four levels; `-j 2`, `--no-cache`), timed with this
//! build's binary and, side by side in the same run, with a baseline binary if one is named:
//! runs interleaved (baseline, this, baseline, this, …) so both see the same machine, then
//! each one's median and the ratio.
//!
//! `cargo bench --bench hidden512` (this build only), or against another build:
//! `MESHPARITY_BASELINE=/path/to/old/meshparity MESHPARITY_ROUNDS=3 cargo bench --bench hidden512`
//! (docs/engines.md builds the code before the engine seam that way).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

const SPEC: &str = r#"
[run]
name = "hidden512"

[models.big]
family = "llama"
layers = 4
hidden = 512
heads = 8
kv_heads = 8
ffn = 1024
vocab = 4096
seq_len = 128

[meshes.dp2]
dp = 2
[meshes.tp2]
tp = 2
[meshes.pp2]
pp = 2
microbatches = 2
[meshes.dp2-tp2-pp2]
dp = 2
tp = 2
pp = 2
microbatches = 2

[[matrix]]
models = ["big"]
meshes = ["dp2", "tp2", "pp2", "dp2-tp2-pp2"]
levels = ["roundtrip", "forward", "curve", "oracle"]
"#;

/// One `meshparity run` of the spec in `dir`: its wall time in seconds and its summary line.
fn run(exe: &Path, dir: &Path, tag: &str) -> (f64, String) {
    let run_dir = dir.join(format!("run-{tag}"));
    let _ = std::fs::remove_dir_all(&run_dir);
    let _ = std::fs::remove_dir_all(dir.join("meshparity-out"));
    let start = Instant::now();
    let out = Command::new(exe)
        .current_dir(dir)
        .args([
            "run",
            "spec.toml",
            "--no-cache",
            "-j",
            "2",
            "--no-progress",
            "--run-dir",
        ])
        .arg(&run_dir)
        .output()
        .expect("meshparity runs");
    let seconds = start.elapsed().as_secs_f64();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{} failed:\n{text}", exe.display());
    let summary = text
        .lines()
        .find(|l| l.contains("job(s) in"))
        .unwrap_or("")
        .trim()
        .to_owned();
    (seconds, summary)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let exe = Path::new(env!("CARGO_BIN_EXE_meshparity"));
    let baseline = std::env::var_os("MESHPARITY_BASELINE").map(std::path::PathBuf::from);
    let rounds: usize = std::env::var("MESHPARITY_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().expect("scratch");
    std::fs::write(dir.path().join("spec.toml"), SPEC).expect("spec written");
    let (mut this, mut base) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        if let Some(b) = &baseline {
            let (s, line) = run(b, dir.path(), "baseline");
            println!("round {round} baseline {s:6.2} s  {line}");
            base.push(s);
        }
        let (s, line) = run(exe, dir.path(), "this");
        println!("round {round} this     {s:6.2} s  {line}");
        this.push(s);
    }
    let t = median(this);
    println!("median this build: {t:.2} s");
    if !base.is_empty() {
        let b = median(base);
        println!(
            "median baseline:   {b:.2} s; ratio this/baseline {:.2}",
            t / b
        );
    }
}
