//! The interleaved pipeline schedule (issue 34 item 5): each pipeline rank holds several model
//! chunks (virtual stages) and alternates between them in Megatron's order. With everything a
//! production run turns on beside it — ZeRO-3, clipping, tied embeddings, weight decay and a
//! warmup — on dp·tp·pp meshes, every level matches world size 1 (f64 to round-off); a rank
//! that runs its chunks in the wrong order is caught and localized to the first layer that
//! received the wrong input, and the bug plans nowhere else.

mod common;

use common::harness::{fixture, meshparity, run_passing};

const SPEC: &str = r#"
[run]
name = "interleaved"
seed = 5
steps = 6
oracle_steps = 3
batch = 8
lr = 3e-3
optimizer = "adamw"
clip_grad_norm = 0.5
weight_decay = 0.1
warmup_steps = 2

[models.tied]
family = "llama"
layers = 4
hidden = 32
heads = 4
kv_heads = 2
ffn = 48
vocab = 64
seq_len = 8
tie_embeddings = true

[meshes.pp2-v2]
pp = 2
microbatches = 2
schedule = "interleaved"

[meshes.dp2-tp2-pp2-v2-z3]
dp = 2
tp = 2
pp = 2
microbatches = 4
schedule = "interleaved"
virtual_stages = 2
zero = 3

[meshes.pp2-1f1b]
pp = 2
microbatches = 2

[[matrix]]
models = ["tied"]
dtypes = ["f32", "f64"]
levels = ["roundtrip", "forward", "oracle", "curve"]

[mutations]
select = ["interleaved-chunks-reversed", "tied-embedding-grad-unsynced", "pp-wrong-send-peer"]
"#;

#[test]
fn interleaved_meshes_match_world_size_one_and_catch_chunks_out_of_order() {
    let fx = fixture(SPEC);
    let r = run_passing(fx.path());
    let jobs = r["jobs"].as_array().unwrap();
    let on = |mesh: &str, bug: &str| {
        jobs.iter()
            .filter(|j| j["mesh"] == mesh && j["mutation"] == bug)
            .collect::<Vec<_>>()
    };
    for mesh in ["pp2-v2", "dp2-tp2-pp2-v2-z3"] {
        for level in ["roundtrip", "forward", "oracle", "curve"] {
            let n = jobs
                .iter()
                .filter(|j| j["mesh"] == mesh && j["level"] == level)
                .count();
            assert_eq!(n, 2, "{mesh}: {level} in f32 and f64");
        }
        for bug in [
            "interleaved-chunks-reversed",
            "tied-embedding-grad-unsynced",
            "pp-wrong-send-peer",
        ] {
            let runs = on(mesh, bug);
            assert_eq!(runs.len(), 2, "{bug} on {mesh}");
            for j in runs {
                assert!(
                    j["summary"].as_str().unwrap().starts_with("caught"),
                    "{j:#}"
                );
                assert_eq!(j["detail"]["localized_as_injected"], true, "{j:#}");
            }
        }
        // Stage 0 (rank 0's first chunk) ran layer 2, rank 0's other chunk: the first wrong
        // value is that layer's input.
        let first = &on(mesh, "interleaved-chunks-reversed")[0]["detail"]["localization"]["first"];
        assert_eq!(first["site"], "layers.2.attn.in.fwd.in", "{first:#}");
    }
    // One chunk per rank: nothing to reverse, so the bug is not planned there.
    assert!(on("pp2-1f1b", "interleaved-chunks-reversed").is_empty());
    assert_eq!(on("pp2-1f1b", "pp-wrong-send-peer").len(), 2);
}

/// `--explain-mesh` says which virtual stages each pipeline rank holds.
#[test]
fn the_mesh_explanation_lists_each_ranks_chunks() {
    let fx = fixture(SPEC);
    let out = meshparity(fx.path())
        .args(["plan", "spec.toml", "--explain-mesh", "dp2-tp2-pp2-v2-z3"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("pipeline stages (interleaved: 2 model chunks per pp rank):\n  pp0  stages 0 2\n  pp1  stages 1 3"),
        "{text}"
    );
}
