//! Localizing a command engine's failures: from the traces a run already wrote (`trace =
//! "always"`, the program run once), and through a global coupling (gradients recorded after
//! clipping) to the gradient that is wrong, on the JAX example (examples/command).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The JAX example's engine with `extra` keys in its table and `bugs` added to its mutations,
/// run from the example's directory whatever directory holds the spec.
fn jax_engine(extra: &str, bugs: &str) -> String {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/command");
    let head = "[engines.jax]\nkind = \"command\"\n";
    let text = std::fs::read_to_string(example.join("jax.toml")).unwrap();
    assert!(text.contains(head) && text.contains("[engines.jax.mutations]\n"));
    text.replace(
        head,
        &format!("{head}{extra}cwd = {:?}\n", example.display().to_string()),
    )
    .replace(
        "[engines.jax.mutations]\n",
        &format!("[engines.jax.mutations]\n{bugs}"),
    )
}

/// `meshparity run spec.toml` in `dir` (holding `jax.toml` and `spec.toml`) with `args`; the
/// run's results, after checking it exited 0.
fn run(dir: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_meshparity"))
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("MESHPARITY_NO_SHRINK", "1")
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args(args)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(dir.join("run/results.json")).unwrap();
    let results: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(out.status.code(), Some(0), "{results:#}");
    results
}

/// The run's one mutation job's summary.
fn mutation_summary(results: &Value) -> String {
    let job = results["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["kind"] == "mutation")
        .expect("a mutation job");
    job["summary"].as_str().unwrap().to_owned()
}

/// Files under `dir` named `name`.
fn find(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == name) {
                out.push(p);
            }
        }
    }
    out
}

/// `trace = "always"`: every run writes its traces, and a caught mutation is localized from its
/// own run's traces (and the reference's, from its artifacts) — the program is not run again.
#[test]
fn an_engine_that_always_traces_is_localized_without_a_rerun() {
    if !common::harness::jax() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("jax.toml"),
        jax_engine("trace = \"always\"\n", ""),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        "include = [\"jax.toml\"]\n[run]\nname = \"always\"\noptimizer = \"sgd\"\nseed = 7\nsteps = 2\nbatch = 8\n\
         [[matrix]]\nmodels = [\"mlp\"]\nmeshes = [\"tp2\"]\nlevels = [\"forward\"]\n",
    )
    .unwrap();
    let results = run(
        dir.path(),
        &[
            "--keep-artifacts",
            "-f",
            "mutation=skip-tp-psum or level=forward",
        ],
    );
    let summary = mutation_summary(&results);
    assert!(
        summary.contains("first divergence: step 0, forward, layers.0.mlp.out"),
        "{summary}"
    );
    // Every trace artifact is either a run's own (beside its weights) or a copy with no
    // program output beside it: the program ran once per run.
    let traced = find(&dir.path().join("run"), "trace.safetensors");
    assert!(
        traced.len() >= 3,
        "the reference's, the run's and the copies: {traced:?}"
    );
    for t in &traced {
        let here = t.parent().unwrap();
        // The program's final.safetensors, moved to the contract's name when collected.
        let own_run = here.join("weights.safetensors").exists();
        assert!(
            own_run || !here.join("program.log").exists(),
            "{} was run again",
            here.display()
        );
    }
}

/// Localization with a global coupling: a program that records gradients after clipping, with
/// the head's gradient alone left unreduced over dp. Clipping on, every gradient differs by the
/// clip coefficient and the first listed (`grad.embed`) is over the limit, yet the head is
/// named, with the coupling said; clipping off, the head is first anyway.
#[test]
fn a_gradient_error_spread_by_the_clip_coefficient_is_localized_to_its_source() {
    if !common::harness::jax() {
        return;
    }
    let engine = jax_engine(
        "",
        "skip-head-grad-psum = { args = [\"--bug\", \"skip-head-grad-psum\"], needs = [\"dp\"] }\n",
    );
    for clip in ["clip_grad_norm = 0.05\n", ""] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("jax.toml"), &engine).unwrap();
        std::fs::write(
            dir.path().join("spec.toml"),
            format!(
                "include = [\"jax.toml\"]\n[run]\nname = \"clip\"\noptimizer = \"sgd\"\nseed = 7\nsteps = 2\n\
                 batch = 8\n{clip}[[matrix]]\nmodels = [\"mlp\"]\nmeshes = [\"dp2\"]\n\
                 levels = [\"oracle\"]\n"
            ),
        )
        .unwrap();
        let results = run(
            dir.path(),
            &["-f", "mutation=skip-head-grad-psum or level=oracle"],
        );
        let summary = mutation_summary(&results);
        assert!(
            summary.contains("first divergence: step 0, gradients, grad.head"),
            "{clip}{summary}"
        );
        assert_eq!(
            summary.contains("a global coupling"),
            !clip.is_empty(),
            "{clip}{summary}"
        );
    }
}

/// A program that writes a rank's block of its logits and traces as the whole array (what the
/// torch hooks did under torchtitan's spmd_types): caught by the forward level as a shape
/// mismatch with its usual cause, and localized as one — never a value divergence with a
/// fitted cause ("the reference's value at step 1: ahead of the run (relative L2 inf)").
#[test]
fn a_shard_written_as_whole_is_a_shape_mismatch_never_a_value_cause() {
    if !common::harness::jax() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("jax.toml"), jax_engine("", "")).unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        "include = [\"jax.toml\"]\n[run]\nname = \"shard\"\noptimizer = \"sgd\"\nseed = 7\nsteps = 2\n\
         batch = 8\n[[matrix]]\nmodels = [\"mlp\"]\nmeshes = [\"dp2\"]\nlevels = [\"forward\"]\n",
    )
    .unwrap();
    let results = run(
        dir.path(),
        &["-f", "mutation=write-dp-shard-as-whole or level=forward"],
    );
    let summary = mutation_summary(&results);
    let hint = "dimension 0 is 1/2 of the reference's: a rank's shard written as the whole tensor";
    assert!(
        summary.starts_with("caught by forward") && summary.contains(hint),
        "{summary}"
    );
    assert!(
        summary.contains("first divergence: step 0, forward, embed.out (shape [4, 8, 32] where the reference's is [8, 8, 32]"),
        "{summary}"
    );
    assert!(
        !summary.contains("likely cause") && !summary.contains("ahead of the run"),
        "{summary}"
    );
}
