//! The torch example (examples/command/torch: a torchtitan-style trainer — DTensor TP with SP,
//! FSDP2, AdamW, clipping, residual dropout at world size 1's positions, prompt-masked labels —
//! launched by torchrun on CPU/gloo, writing its files and traces with meshparity_hooks.torch)
//! checked by the command engine at world size 1 against dp2·tp2·sp (FSDP2 beside TP with SP:
//! the spec's other meshes repeat its paths on fewer dimensions): every level passes, every bug
//! switch is caught, and each is localized where the program injects it, with its cause and
//! gradients recorded before clipping.

mod common;

use serde_json::Value;

/// The first divergence's (step, site) of a job, if localization found one.
fn first(job: &Value) -> Option<(u64, String)> {
    let f = &job["detail"]["localization"]["first"];
    Some((f["step"].as_u64()?, f["site"].as_str()?.to_owned()))
}

#[test]
fn the_torch_example_passes_and_every_bug_is_caught_where_it_is_injected() {
    if !common::torch() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // dp2·tp2·sp has every bug and every path (tp2·sp until 2026-12-02 repeated the TP ones
    // without FSDP: 8 of the test's 19 jobs, cut for CI's budget).
    let (code, results) = common::run_in_repo(
        // `sampler-rank-unwired` (named by the inputs, whose judging tests/resume and the
        // judge's own tests cover) is left to a run of the example: CI's budget.
        &[
            "examples/command/torch/torch.toml",
            "-f",
            "mesh=dp2-tp2-sp and not mutation=sampler-rank-unwired",
        ],
        &tmp.path().join("run"),
    );
    let jobs = results["jobs"].as_array().unwrap();
    let failed: Vec<&str> = jobs
        .iter()
        .filter(|j| j["status"] != "passed")
        .map(|j| j["summary"].as_str().unwrap_or("?"))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(code, Some(0));
    // train + 4 levels, the reference, and the five bugs.
    assert_eq!(jobs.len(), 11);
    // Each level that trains past the first step held every rank's rows to world size 1's.
    for j in jobs
        .iter()
        .filter(|j| j["level"].is_string() && j["kind"] != "mutation")
    {
        common::judged_inputs(j);
    }
    let mutations: Vec<&Value> = jobs.iter().filter(|j| j["kind"] == "mutation").collect();
    assert_eq!(mutations.len(), 5);
    for m in mutations {
        let name = m["mutation"].as_str().unwrap();
        assert_eq!(m["detail"]["caught"], true, "{name}");
        let at =
            first(m).unwrap_or_else(|| panic!("{}: not localized: {}", m["name"], m["summary"]));
        let fits = match name {
            // Each rank's own norm, traced as the program computes it.
            "clip-local-norm" => at == (0, "grad_norm".to_owned()),
            // The loss's normalizer: the first gradient backward carries.
            "local-loss-normalization" => at == (0, "head.bwd.in".to_owned()),
            // Each rank's own initial draw: the first module's output.
            "init-per-rank-seed" => at == (0, "embed".to_owned()),
            // The second TP rank's norms move after the first update: step 1, layer 0; and
            // the replica digests disagree, which fails the oracle level.
            "norm-drift-one-tp-rank" => {
                let oracle = m["detail"]["caught_by"]
                    .as_array()
                    .unwrap()
                    .contains(&"oracle".into());
                oracle && at.0 == 1 && ["layers.0.norm", "layers.0.w1"].contains(&at.1.as_str())
            }
            // Each rank drops its local tensor with torch's own dropout: the first dropout.
            "dropout-local-shape" => at == (0, "layers.0.drop".to_owned()),
            other => panic!("unexpected bug {other}"),
        };
        assert!(fits, "{}: localized at {at:?}: {}", m["name"], m["summary"]);
        // The spec's `site` for each bug: the summary's "localized as injected" column.
        assert_eq!(m["detail"]["localized_as_injected"], true, "{}", m["name"]);
        if name == "clip-local-norm" {
            // Every rank's copy of the norm is traced: each its own shards' (the squares of
            // the copies sum to the reference's).
            let cause = &m["detail"]["localization"]["cause"];
            assert_eq!(cause["kind"], "partial-norm", "{cause}");
        }
    }
}
