//! CI's partition of the release sweep (`examples/full-sweep.toml`): the cells the whole sweep
//! (1,607 jobs, ~7 min on 2 cores) is too slow to run beside the rest of CI for — the moe family
//! (softmax router, dropless; and DeepSeek-V3-style: sigmoid router with the score-correction
//! bias, shared expert, capacity factor) on the expert-parallel meshes and on CP, every level
//! and every mutation that applies — run as a user would and required to pass job for job.

mod common;

#[test]
fn the_release_sweeps_expert_and_context_parallel_moe_cells_pass() {
    let out = tempfile::tempdir().unwrap();
    let (code, results) = common::run_in_repo(
        &[
            "examples/full-sweep.toml",
            "-f",
            "model=moe,moe-v3",
            "-f",
            "mesh=ep2,ep2-etp2,dp4-ep2,cp2",
        ],
        &out.path().join("run"),
    );
    assert_eq!(code, Some(0), "{results:#}");
    let jobs = results["jobs"].as_array().unwrap();
    let mutations: Vec<&str> = jobs.iter().filter_map(|j| j["mutation"].as_str()).collect();
    for bug in [
        "ep-a2a-combine-wrong-permutation",
        "ep-expert-grad-dense-group",
        "ep-expert-grad-sync-skipped",
        "cp-stale-kv-chunk",
        "moe-capacity-local-tokens",
        "moe-expert-bias-one-rank",
    ] {
        assert!(mutations.contains(&bug), "{bug} not in the partition");
    }
    for j in jobs {
        assert_eq!(j["status"], "passed", "{j:#}");
        if j["kind"] == "mutation" && j["mutation"] != "save-drops-tp-shards" {
            let summary = j["summary"].as_str().unwrap();
            assert!(summary.contains("first divergence"), "{summary}");
        }
    }
}
