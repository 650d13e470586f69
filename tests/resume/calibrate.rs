//! `calibrate` over pairs: each resumes from its own mesh, under the swept training.

use crate::common;
use crate::common::harness::{fixture, meshparity};
use crate::MESHES;

/// `calibrate --optimizer sgd` re-decides an engine's bugs under the swept training: the JAX
/// example's AdamW-only bug is not injected under SGD (where it would be a no-op reported as
/// missed), the others are, and every one is caught.
#[test]
fn calibrating_under_sgd_leaves_out_an_engines_adamw_bug() {
    if !common::harness::jax() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = meshparity(root)
        .args(["calibrate", "examples/command/jax-resume.toml", "--json"])
        .args(["--seeds", "1", "--first-seed", "301", "--optimizer", "sgd"])
        .args(["-f", "mesh=tp2-to-dp2-at2", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let bugs: Vec<&str> = json["margins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mutation"].as_str().unwrap())
        .collect();
    assert!(!bugs.contains(&"resume-moments-dropped"), "{bugs:?}");
    assert!(bugs.contains(&"resume-step-reset"), "{bugs:?}");
}

/// `calibrate` runs each pair from its own `from` mesh and judges its states against a
/// reference that kept them: the loader's TP-axis bug is injected only on the pair saved under
/// tp (a pair from world size 1 has no TP shards to misjoin) and caught there, and the oracle's
/// state comparisons are among the gates it measures.
#[test]
fn calibrate_resumes_each_pair_from_its_own_mesh_and_measures_its_states() {
    let fx = fixture(&format!(
        "[run]\nname = \"c\"\nseed = 3\nsteps = 4\noracle_steps = 3\nbatch = 8\n\
         optimizer = \"adamw\"\n{}{MESHES}\
         [[resume]]\nfrom = [\"tp2-sp\", \"world1\"]\nto = [\"world1\"]\nat = 2\n\n\
         [[matrix]]\nmodels = [\"tiny\"]\nmeshes = [\"tp2-sp\"]\ndtypes = [\"f32\"]\n\
         levels = [\"oracle\"]\n\n\
         [mutations]\nselect = [\"resume-tp-shard-wrong-axis\"]\n",
        tiny_model!()
    ));
    let run = meshparity(fx.path())
        .args([
            "calibrate",
            "spec.toml",
            "--json",
            "--seeds",
            "1",
            "-f",
            "mesh=*-to-*",
        ])
        .args(["--out", "cal"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let margins: Vec<(&str, bool)> = json["margins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let missed = m["missed_seeds"].as_array().is_some_and(|s| !s.is_empty());
            (m["mesh"].as_str().unwrap(), missed)
        })
        .collect();
    assert_eq!(margins, [("tp2-sp-to-world1-at2", false)], "{text}");
    let states = json["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["level"].as_str().unwrap().starts_with("oracle state"))
        .count();
    assert!(states >= 2, "{text}");
}
