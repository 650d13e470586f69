//! Label smoothing (`[run] label_smoothing`, issue 36 item 4): the vocab-parallel cross-entropy
//! spreads ε over the whole vocabulary, so under TP the uniform share's Σ z is all-reduced.
//! Every level matches world size 1 on meshes that split the vocabulary or the sequence (f64 to
//! round-off), the smoothing changes what the reference computes, and the Megatron bug — the
//! share averaged over each rank's own vocabulary shard — is caught, localized at the reduce
//! it leaves out, and shrunk to a repro that still smooths.

mod common;

use common::harness::{fixture, meshparity, results, run_passing};

const SPEC: &str = r#"
[run]
name = "smoothing"
seed = 11
steps = 4
batch = 8
label_smoothing = 0.1

[models.tiny]
family = "llama"
layers = 2
hidden = 32
heads = 4
kv_heads = 4
ffn = 48
vocab = 64
seq_len = 8

[meshes.tp2-sp]
tp = 2
sp = true

[meshes.tp4]
tp = 4

[meshes.dp2-tp2-pp2]
dp = 2
tp = 2
pp = 2
microbatches = 2

[meshes.cp2]
cp = 2

[[matrix]]
models = ["tiny"]
dtypes = ["f32", "f64"]
levels = ["forward", "oracle", "curve"]

[mutations]
select = ["label-smoothing-local-vocab"]
"#;

#[test]
fn smoothed_meshes_match_world_size_one_and_catch_the_local_vocabulary_share() {
    let fx = fixture(SPEC);
    let r = run_passing(fx.path());
    let jobs = r["jobs"].as_array().unwrap();
    for mesh in ["tp2-sp", "tp4", "dp2-tp2-pp2", "cp2"] {
        let checks = jobs
            .iter()
            .filter(|j| j["mesh"] == mesh && j["level"].is_string())
            .count();
        assert_eq!(checks, 6, "{mesh}: three levels in f32 and f64");
    }
    let caught: Vec<_> = jobs
        .iter()
        .filter(|j| j["mutation"] == "label-smoothing-local-vocab")
        .collect();
    // Planned where TP splits the vocabulary only: not on cp2.
    assert_eq!(caught.len(), 6, "{caught:#?}");
    for j in &caught {
        assert_ne!(j["mesh"], "cp2");
        assert!(
            j["summary"]
                .as_str()
                .unwrap()
                .starts_with("caught by forward"),
            "{j:#}"
        );
        let first = &j["detail"]["localization"]["first"];
        assert_eq!(first["site"], "loss.smooth.fwd.out", "{first:#}");
    }
    // Shrunk, the repro still smooths (without it the bug would plan nowhere).
    let out = meshparity(fx.path())
        .args([
            "run",
            "spec.toml",
            "--no-progress",
            "--run-dir",
            "shrunk",
            "--shrink",
        ])
        .args([
            "-f",
            "mutation=label-smoothing-local-vocab and mesh=tp2-sp and dtype=f32",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = results(&fx.path().join("shrunk"));
    let repro = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|j| j["detail"]["repro"]["spec"].as_str().map(str::to_owned));
    let repro = fx
        .path()
        .join("shrunk")
        .join(repro.expect("the job shrank"));
    let repro = std::fs::read_to_string(repro).unwrap();
    assert!(repro.contains("label_smoothing = 0.1"), "{repro}");
}

/// The same reference without smoothing computes another loss: ε is not ignored.
#[test]
fn smoothing_changes_the_reference() {
    let loss = |spec: &str| -> f64 {
        let fx = fixture(spec);
        let r = run_passing(fx.path());
        let reference = r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == "tiny@f64/reference")
            .cloned()
            .expect("the f64 reference");
        let dir = reference["detail"]["artifacts"]
            .as_str()
            .map(std::path::PathBuf::from);
        let curve = dir.expect("its artifacts").join("curve.jsonl");
        let first = std::fs::read_to_string(curve).unwrap();
        let row: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
        row["loss"].as_f64().unwrap()
    };
    let only = |s: &str| {
        s.replace(
            "[mutations]\nselect = [\"label-smoothing-local-vocab\"]\n",
            "",
        )
    };
    let smoothed = loss(&only(SPEC));
    let plain = loss(&only(&SPEC.replace("label_smoothing = 0.1\n", "")));
    assert!(
        (smoothed - plain).abs() > 1e-3 * plain,
        "ε = 0.1 moved the first loss from {plain} to {smoothed} only"
    );
}
