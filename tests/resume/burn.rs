//! The built-in engine's pairs: every layout resumes every other, and every bug is caught.

use crate::common;
use crate::common::harness::{fixture, meshparity, refused, run_passing};
use crate::{bug_jobs, spec, BUGS, MESHES};

#[test]
fn resumed_runs_match_the_uninterrupted_run_and_each_bug_is_named_at_its_state_entry() {
    let fx = fixture(&spec(
        r#"["roundtrip", "curve", "oracle"]"#,
        r#"["f64", "f32"]"#,
    ));
    let r = run_passing(fx.path());
    let jobs = r["jobs"].as_array().unwrap();
    // Every pair was planned, for both models where the pair's first mesh is theirs.
    for mesh in [
        "tp2-sp-to-world1-at2",
        "dp2-tp2-pp2-to-cp2-at2",
        "world1-to-dp2-at2",
        "ep2-to-tp2-sp-at2",
        "dp2-tp2-pp2-to-tp2-sp-at2",
    ] {
        let cells: Vec<_> = jobs
            .iter()
            .filter(|j| j["mesh"] == mesh && j["level"] == "curve")
            .collect();
        assert!(!cells.is_empty(), "{mesh} never checked");
    }
    for (bug, entry) in BUGS {
        let runs: Vec<_> = jobs.iter().filter(|j| j["mutation"] == bug).collect();
        assert!(!runs.is_empty(), "{bug} never planned");
        for j in runs {
            let summary = j["summary"].as_str().unwrap();
            assert!(
                summary.starts_with("caught by roundtrip"),
                "{bug}: {summary}"
            );
            assert!(summary.contains(entry), "{bug}: {summary}");
            assert_eq!(j["detail"]["localized_as_injected"], true, "{j:#}");
        }
    }
    // Every pair's oracle level judged its saved state at the checkpoint and its state after
    // `oracle_steps` against the reference's at those steps: updates and moments within the
    // oracle's gates (in f64 to round-off), counters bit-exact.
    let oracles = jobs
        .iter()
        .filter(|j| j["level"] == "oracle" && j["mesh"].as_str().unwrap().contains("-to-"));
    let mut judged = 0;
    for j in oracles {
        let comparisons = j["detail"]["comparisons"].as_array().unwrap();
        for what in [
            "state at the checkpoint (step 2) (updates, moments)",
            "state at the checkpoint (step 2) (counters)",
            "state after step 4 (updates, moments)",
            "state after step 4 (counters)",
        ] {
            let c = comparisons
                .iter()
                .find(|c| c["what"] == what)
                .unwrap_or_else(|| panic!("{}: no `{what}`", j["name"]));
            assert!(c["compared"].as_u64().unwrap() >= 4, "{c:#}");
            let worst = c["gates"]
                .as_array()
                .unwrap()
                .iter()
                .max_by(|a, b| {
                    a["ratio"]
                        .as_f64()
                        .unwrap()
                        .total_cmp(&b["ratio"].as_f64().unwrap())
                })
                .unwrap();
            if j["dtype"] == "f64" {
                let ratio = worst["ratio"].as_f64().unwrap();
                assert!(ratio < 1e-3, "{}: {what}: {worst:#}", j["name"]);
            }
        }
        judged += 1;
    }
    assert!(judged >= 20, "{judged} pairs' oracle levels judged");
    // A resumption bug runs only where there is a resumption, and the bias's only on the moe.
    let planned = |bug: &str, mesh: &str| {
        jobs.iter()
            .any(|j| j["mutation"] == bug && j["mesh"] == mesh)
    };
    assert!(!planned("resume-step-reset", "tp2-sp"));
    assert!(planned("resume-step-reset", "world1-to-pp2-at2"));
    assert!(planned("resume-expert-bias-not-saved", "ep2-to-world1-at2"));
    // The EP map's only where the resumed mesh splits experts, the TP axis's only where the
    // saved one split tensors.
    assert!(planned(
        "resume-experts-loaded-by-local-index",
        "ep2-to-ep2-at2"
    ));
    assert!(!planned(
        "resume-experts-loaded-by-local-index",
        "ep2-to-world1-at2"
    ));
    assert!(planned(
        "resume-tp-shard-wrong-axis",
        "tp2-sp-to-world1-at2"
    ));
    assert!(!planned("resume-tp-shard-wrong-axis", "world1-to-pp2-at2"));
    // The fused fc1's only where the resumed mesh splits the dense MLP over tp.
    assert!(planned(
        "resume-fc1-split-unchunked",
        "dp2-tp2-pp2-to-tp2-sp-at2"
    ));
    assert!(!planned(
        "resume-fc1-split-unchunked",
        "tp2-sp-to-world1-at2"
    ));
    assert!(!jobs
        .iter()
        .any(|j| j["mutation"] == "resume-expert-bias-not-saved" && j["model"] == "tiny"));
}

/// Without the state comparison, the continuation alone (the curve over every step and the
/// weights after `oracle_steps`, against the uninterrupted run) catches every bug in f32. (In
/// bf16 it misses the router bias's: routing is replayed, so only the bias itself differs, under
/// the layer-averaged bf16 gate; docs/verdicts.md.) The data position's is named as such: the
/// curve level holds the rows each rank trained on to the reference's, and the first step
/// after the resumption took step 1's; every other bug leaves the inputs right.
#[test]
fn the_continuation_alone_catches_every_resumption_bug() {
    let fx = fixture(&spec(r#"["curve", "oracle"]"#, r#"["f32"]"#));
    let r = run_passing(fx.path());
    let inputs = |j: &serde_json::Value| -> Vec<serde_json::Value> {
        let levels = j["detail"]["levels"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        levels
            .iter()
            .chain([&j["detail"]])
            .flat_map(|o| o["comparisons"].as_array().cloned().unwrap_or_default())
            .filter(|c| c["what"] == "inputs")
            .collect()
    };
    for (bug, _) in BUGS {
        for j in bug_jobs(&r, bug) {
            let summary = j["summary"].as_str().unwrap();
            assert!(summary.starts_with("caught by"), "{bug}: {summary}");
            let data = bug == "resume-data-position-reset";
            for c in inputs(j) {
                assert_eq!(c["passed"] == false, data, "{bug}: {c:#}");
            }
            if data {
                assert!(
                    summary.contains("first divergence: the inputs, before any computation")
                        && summary.contains("at step 3 (after resuming from step 2's")
                        && summary.contains("the rows the reference took at step 1")
                        && summary.contains("was not restored"),
                    "{summary}"
                );
                assert_eq!(j["detail"]["localized_as_injected"], true, "{j:#}");
            }
        }
    }
    // Every correct pair's curve level compared each rank's rows at every step.
    let curves: Vec<_> = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["level"] == "curve" && j["mesh"].as_str().unwrap().contains("-to-"))
        .collect();
    assert!(curves.len() >= 10, "{} pairs' curves", curves.len());
    for j in curves {
        let c = inputs(j);
        assert!(c.len() == 1 && c[0]["passed"] == true, "{j:#}");
        assert!(
            c[0]["compared"].as_u64().unwrap() >= 5 * 8 * 2,
            "{:#}",
            c[0]
        );
    }
}

/// The oracle level alone catches every resumption bug in the resumed run's state after
/// `oracle_steps`, judged against the reference's at that step: a state no layout may reach
/// (moments restarted, a counter behind, experts or shards misplaced, the bias lost).
#[test]
fn the_final_state_catches_every_resumption_bug() {
    let fx = fixture(&spec(r#"["oracle"]"#, r#"["f32"]"#));
    let r = run_passing(fx.path());
    for (bug, _) in BUGS {
        for j in bug_jobs(&r, bug) {
            let failed: Vec<&str> = j["detail"]["levels"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|o| o["comparisons"].as_array().unwrap())
                .filter(|c| c["passed"] == false)
                .map(|c| c["what"].as_str().unwrap())
                .collect();
            assert!(
                failed.iter().any(|w| w.starts_with("state after step 4")),
                "{bug}: {failed:?} {j:#}"
            );
        }
    }
}

/// The checkpoint a pair saves is a directory of per-rank safetensors and an index naming each
/// shard's slice, which `meshparity compare` reads as one checkpoint.
#[test]
fn the_sharded_checkpoint_is_read_whole_by_compare() {
    let fx = fixture(
        &spec(r#"["roundtrip"]"#, r#"["f32"]"#)
            .replace("[mutations]\nselect = [", "[mutations]\nexclude = ["),
    );
    meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args([
            "--keep-artifacts",
            "--no-cache",
            "--filter",
            "mesh=dp2-tp2-pp2-to-cp2-at2",
        ])
        .assert()
        .code(0);
    let index = common::harness::files(fx.path())
        .into_iter()
        .find(|p| p.ends_with("resume-checkpoint/index.json"))
        .expect("the pair's checkpoint has an index");
    let dir = index.parent().unwrap();
    let ranks = std::fs::read_dir(dir).unwrap().count() - 1;
    assert_eq!(ranks, 8, "one file per rank of dp2-tp2-pp2");
    let saved = dir.parent().unwrap().join("resume-saved.safetensors");
    let out = meshparity(fx.path())
        .args(["compare"])
        .arg(&saved)
        .arg(dir)
        .args(["--profile", "exact", "--worst", "1000"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("optim.exp_avg_sq.layers.1.mlp.down.weight"),
        "{text}"
    );
}

#[test]
fn what_cannot_resume_is_refused_at_its_line() {
    let base = format!(
        "[run]\nname = \"r\"\nbatch = 8\nsteps = 4\noracle_steps = 3\n{}{MESHES}",
        tiny_model!()
    );
    for (pair, says) in [
        (
            "from = [\"tp2\"]\nto = [\"pp2\"]\nat = 1",
            "unknown mesh `tp2`",
        ),
        (
            "from = [\"dp2\"]\nto = [\"pp2\"]\nat = 3",
            "`at = 3` leaves nothing to resume",
        ),
        (
            "from = [\"dp2\"]\nto = [\"world\"]\nat = 1",
            "did you mean `world1`?",
        ),
        ("from = [\"dp2\"]\nat = 1", "`resume` entry has no `to`"),
    ] {
        refused(&format!("{base}[[resume]]\n{pair}\n"), says);
    }
}

/// Stopping and resuming on the same layout changes no arithmetic, so the resumed run's curve
/// and weights are the uninterrupted run's on that mesh to the bit: nothing of the state is lost
/// or rounded on the way through the checkpoint (f32 AdamW with dropout: moments, step, data
/// and random positions all matter).
#[test]
fn a_stop_and_resume_on_the_same_layout_is_bit_identical() {
    let fx = fixture(&format!(
        "[run]\nname = \"same\"\nseed = 3\nsteps = 5\noracle_steps = 4\nbatch = 8\n\
         optimizer = \"adamw\"\nhidden_dropout = 0.1\n{}{MESHES}\
         [[resume]]\nfrom = [\"dp2-tp2-pp2\"]\nto = [\"dp2-tp2-pp2\"]\nat = 2\n\n\
         [[matrix]]\nmodels = [\"tiny\"]\nmeshes = [\"dp2-tp2-pp2\"]\ndtypes = [\"f32\"]\n\
         levels = [\"curve\", \"oracle\"]\n\n[mutations]\nselect = []\n",
        tiny_model!()
    ));
    let r = run_passing(fx.path());
    let dir = |mesh: &str| {
        let job = r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["mesh"] == mesh && j["kind"] == "train")
            .unwrap_or_else(|| panic!("no train job on {mesh}"));
        std::path::PathBuf::from(job["detail"]["artifacts"].as_str().unwrap())
    };
    let (plain, resumed) = (dir("dp2-tp2-pp2"), dir("dp2-tp2-pp2-to-dp2-tp2-pp2-at2"));
    for file in ["weights.safetensors", "curve.jsonl"] {
        let out = meshparity(fx.path())
            .arg("compare")
            .arg(plain.join(file))
            .arg(resumed.join(file))
            .args(["--profile", "exact"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{file}: {text}");
    }
}

/// ZeRO-sharded meshes save their flat shards of the weights and moments gathered to the layout
/// without ZeRO, and load by cutting their own flat shards from it: ZeRO-1, ZeRO-3 and hybrid
/// sharding resume on each other, on TP and on world size 1, and dropped moments are caught.
#[test]
fn sharded_optimizer_state_resumes_across_zero_stages() {
    let fx = fixture(&format!(
        "[run]\nname = \"z\"\nseed = 5\nsteps = 5\noracle_steps = 4\nbatch = 8\n\
         optimizer = \"adamw\"\n{}\
         [meshes.dp2-z1-mb2]\ndp = 2\nzero = 1\nmicrobatches = 2\n\
         [meshes.dp4-z3-hs2]\ndp = 4\nzero = 3\nshard = 2\n\
         [meshes.dp2-tp2-sp-z3]\ndp = 2\ntp = 2\nsp = true\nzero = 3\n\
         [[resume]]\nfrom = [\"dp2-z1-mb2\", \"dp4-z3-hs2\"]\n\
         to = [\"dp2-tp2-sp-z3\", \"world1\", \"dp4-z3-hs2\"]\nat = 2\n\
         [[matrix]]\nmodels = [\"tiny\"]\nmeshes = [\"dp2-z1-mb2\", \"dp4-z3-hs2\"]\n\
         dtypes = [\"f32\"]\nlevels = [\"roundtrip\", \"curve\", \"oracle\"]\n\n\
         [mutations]\nselect = [\"resume-optimizer-moments-dropped\"]\n",
        tiny_model!()
    ));
    let r = run_passing(fx.path());
    let caught = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["mutation"] == "resume-optimizer-moments-dropped")
        .inspect(|j| {
            assert!(
                j["summary"].as_str().unwrap().starts_with("caught"),
                "{j:#}"
            )
        })
        .count();
    assert_eq!(caught, 6, "one per pair");
}

/// `plan --explain-mesh` knows a pair's mesh: the layout that resumes, and where from.
#[test]
fn explain_mesh_names_where_a_pair_resumes_from() {
    let fx = fixture(&spec(r#"["curve"]"#, r#"["f32"]"#));
    let out = meshparity(fx.path())
        .args([
            "plan",
            "spec.toml",
            "--explain-mesh",
            "dp2-tp2-pp2-to-cp2-at2",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("cp 2") && text.contains("resumed from mesh `dp2-tp2-pp2` after step 2"),
        "{text}"
    );
}
