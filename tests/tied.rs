//! Tied embeddings (issue 34 item 4): one weight for the embedding and the output head,
//! vocab-parallel under TP in both uses, a copy on the first and on the last pipeline stage
//! whose gradients the embedding group all-reduces. Every layout matches world size 1 at every
//! level, with and without ZeRO-3, for both families; the tied-embedding bugs of the catalog
//! are caught and localized at the embedding's gradient.

#[macro_use]
mod common;

use common::harness::{files, fixture, meshparity, run_passing, safetensors_header};

const SPEC: &str = r#"
[models.tied]
family = "llama"
layers = 2
hidden = 32
heads = 4
kv_heads = 2
ffn = 48
vocab = 64
seq_len = 8
tie_embeddings = true

[models.moe-tied]
family = "moe"
layers = 2
hidden = 32
heads = 4
kv_heads = 2
ffn = 32
vocab = 64
seq_len = 8
experts = 4
top_k = 2
tie_embeddings = true

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

[meshes.dp2-tp2-pp2-z3]
dp = 2
tp = 2
pp = 2
microbatches = 2
zero = 3

[meshes.dp2-ep2-pp2]
dp = 2
ep = 2
pp = 2
microbatches = 2

[[matrix]]
models = ["tied"]
meshes = ["tp2", "pp2", "dp2-tp2-pp2", "dp2-tp2-pp2-z3"]
dtypes = ["f32", "f64"]

[[matrix]]
models = ["moe-tied"]
meshes = ["dp2-ep2-pp2", "dp2-tp2-pp2-z3"]
dtypes = ["f32"]

[mutations]
select = ["tied-embedding-grad-unsynced", "tied-embedding-shards-mismatched", "pp-wrong-send-peer", "clip-norm-local-shards"]
"#;

fn spec() -> String {
    format!(
        "[run]\nname = \"tied\"\nseed = 9\nsteps = 6\noracle_steps = 3\nbatch = 8\nlr = 3e-3\n\
         clip_grad_norm = 0.5\n{SPEC}"
    )
}

#[test]
fn tied_embeddings_match_world_size_one_and_their_bugs_are_caught() {
    let fx = fixture(&spec());
    let r = run_passing(fx.path());
    let jobs = r["jobs"].as_array().unwrap();
    for bug in [
        "tied-embedding-grad-unsynced",
        "tied-embedding-shards-mismatched",
    ] {
        let runs: Vec<_> = jobs.iter().filter(|j| j["mutation"] == bug).collect();
        assert!(!runs.is_empty(), "{bug} never planned");
        for j in runs {
            assert!(j["mesh"].as_str().unwrap().contains("pp2"), "{j:#}");
            assert_eq!(j["detail"]["localized_as_injected"], true, "{j:#}");
        }
    }
    // The shard-offset bug needs a sharded optimizer; the plain embedding-group one does not.
    let on = |bug: &str, mesh: &str| {
        jobs.iter()
            .any(|j| j["mutation"] == bug && j["mesh"] == mesh)
    };
    assert!(on("tied-embedding-grad-unsynced", "dp2-tp2-pp2"));
    assert!(!on("tied-embedding-shards-mismatched", "dp2-tp2-pp2"));
    assert!(on("tied-embedding-shards-mismatched", "dp2-tp2-pp2-z3"));
}

/// The reference of a tied model has no output head of its own, and `--explain-mesh` lists the
/// embedding groups (first and last stage) of a pipelined mesh.
#[test]
fn a_tied_model_has_one_weight_and_its_embedding_groups_are_listed() {
    let spec = spec();
    let (head, _) = spec.split_once("[[matrix]]").unwrap();
    let fx = fixture(&format!(
        "{head}[[matrix]]\nmodels = [\"tied\"]\nmeshes = [\"pp2\"]\ndtypes = [\"f64\"]\n\
         levels = [\"roundtrip\"]\n\n[mutations]\nselect = []\n"
    ));
    meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args(["--keep-artifacts", "--no-cache"])
        .assert()
        .code(0);
    let seed = files(fx.path())
        .into_iter()
        .find(|p| p.file_name().unwrap() == "seed.safetensors")
        .expect("the reference's seed checkpoint");
    let header = safetensors_header(&seed);
    assert!(
        header.get("embed.weight").is_some() && header.get("output.weight").is_none(),
        "{header}"
    );
    let out = meshparity(fx.path())
        .args(["plan", "spec.toml", "--explain-mesh", "dp2-tp2-pp2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("embedding 4 group(s) of 2"), "{text}");
    assert!(text.contains("[0 4] [1 5] [2 6] [3 7]"), "{text}");
}
