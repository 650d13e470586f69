//! The vocabulary's details under TP (issue 36 item 4): a vocabulary tp does not divide is
//! padded and its padding masked out of the softmax, with label smoothing and the z-loss on.
//! Every level matches world size 1 (f64 to round-off) on meshes that pad the vocabulary, and
//! the two bugs that live there — the padding left in the softmax (Megatron-LM#1754) and the
//! logits gathered before the vocab-parallel loss (#7452 finding 2) — are caught where they
//! exist, localized at the Σ exp each rank computes, and never planned where TP is 1.

mod common;

use common::harness::{fixture, run_passing};

const SPEC: &str = r#"
[run]
name = "vocabulary"
seed = 5
steps = 4
batch = 8
label_smoothing = 0.1
z_loss = 1e-3

# 61 = 2·30 + 1 = 4·15 + 1: one padding column on tp2, three on tp4.
[models.tiny]
family = "llama"
layers = 2
hidden = 32
heads = 4
kv_heads = 4
ffn = 48
vocab = 61
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
levels = ["roundtrip", "forward", "oracle", "curve"]

[mutations]
select = ["vocab-padding-unmasked", "ce-on-gathered-logits"]
"#;

#[test]
fn padded_vocabularies_match_world_size_one_and_catch_their_bugs() {
    let fx = fixture(SPEC);
    let r = run_passing(fx.path());
    let jobs = r["jobs"].as_array().unwrap();
    for mesh in ["tp2-sp", "tp4", "dp2-tp2-pp2", "cp2"] {
        let checks = jobs
            .iter()
            .filter(|j| j["mesh"] == mesh && j["level"].is_string() && j["mutation"].is_null())
            .count();
        assert_eq!(checks, 8, "{mesh}: four levels in f32 and f64");
    }
    for bug in ["vocab-padding-unmasked", "ce-on-gathered-logits"] {
        let caught: Vec<_> = jobs.iter().filter(|j| j["mutation"] == bug).collect();
        // Planned where TP splits the vocabulary only: not on cp2.
        assert_eq!(caught.len(), 6, "{bug}: {caught:#?}");
        for j in &caught {
            assert_ne!(j["mesh"], "cp2");
            let summary = j["summary"].as_str().unwrap();
            assert!(summary.starts_with("caught by forward"), "{j:#}");
            let first = &j["detail"]["localization"]["first"];
            assert_eq!(first["site"], "loss.sumexp.fwd.in", "{bug}: {first:#}");
        }
    }
}

/// In bf16 the padding's share of Σ exp (one column in 62) is under every trajectory gate; a
/// correct run never moves the padding, so merging the shards catches it exactly.
#[test]
fn bf16_catches_a_trained_padding_exactly() {
    let spec = SPEC.replace(r#"dtypes = ["f32", "f64"]"#, r#"dtypes = ["bf16"]"#);
    let fx = fixture(&spec);
    let out = common::harness::meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args(["-f", "mutation=vocab-padding-unmasked and mesh=tp2-sp"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = common::harness::results(&fx.path().join("run"));
    let job = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["mutation"] == "vocab-padding-unmasked")
        .cloned()
        .unwrap();
    let summary = job["summary"].as_str().unwrap();
    assert!(summary.starts_with("caught by oracle"), "{job:#}");
    assert!(
        summary.contains("`output.weight`: its padding past the vocabulary"),
        "{summary}"
    );
}
