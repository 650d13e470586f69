//! Weight decay with norms and biases exempt, and a learning-rate warmup then decay (issue 34
//! item 6), on the built-in engine: every layout still matches world size 1 at every level, the
//! schedule changes what is trained (a run with it differs from one without), and what cannot
//! be scheduled is refused at its line.

#[macro_use]
mod common;

use common::harness::{fixture, meshparity, refused, run_passing};

fn spec(run_keys: &str) -> String {
    format!(
        "[run]\nname = \"sched\"\nseed = 21\nsteps = 6\noracle_steps = 3\nbatch = 8\n{run_keys}\n{}{}",
        tiny_model!(),
        r#"
[meshes.dp2]
dp = 2

[meshes.tp2-sp]
tp = 2
sp = true

[meshes.pp2]
pp = 2
microbatches = 2

[meshes.dp2-tp2-pp2]
dp = 2
tp = 2
pp = 2
microbatches = 2

[[matrix]]
models = ["tiny"]
dtypes = ["f32", "f64"]
levels = ["forward", "oracle", "curve"]

[mutations]
select = []
"#
    )
}

const SCHEDULED: &str =
    "lr = 3e-3\nweight_decay = 0.1\nwarmup_steps = 2\nlr_decay = \"cosine\"\nmin_lr = 3e-4";

#[test]
fn every_layout_matches_with_weight_decay_warmup_and_cosine_decay() {
    let fx = fixture(&spec(SCHEDULED));
    let r = run_passing(fx.path());
    assert!(r["jobs"].as_array().unwrap().len() >= 26, "{r:#}");
}

/// The schedule and the decay are in what is trained: the reference's final weights with them
/// differ from those without.
#[test]
fn the_schedule_changes_the_training() {
    let weights = |keys: &str| {
        let fx = fixture(&spec(keys).replace("dtypes = [\"f32\", \"f64\"]", "dtypes = [\"f64\"]"));
        meshparity(fx.path())
            .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
            .args(["--filter", "name=tiny@f64/reference", "--keep-artifacts"])
            .assert()
            .code(0);
        let found = common::harness::files(fx.path())
            .into_iter()
            .find(|p| p.file_name().unwrap() == "weights.safetensors")
            .expect("the reference's weights");
        std::fs::read(found).unwrap()
    };
    let plain = weights("lr = 3e-3");
    assert_ne!(plain, weights(SCHEDULED));
    assert_ne!(plain, weights("lr = 3e-3\nweight_decay = 0.1"));
    assert_ne!(plain, weights("lr = 3e-3\nwarmup_steps = 2"));
}

#[test]
fn what_cannot_be_scheduled_is_refused_at_its_line() {
    for (keys, says) in [
        ("warmup_steps = 6", "leaves none of the run's 6 steps"),
        ("lr = 1e-3\nmin_lr = 1e-2", "is above `run.lr`"),
        ("lr_decay = \"step\"", "lr_decay"),
        ("weight_decay = -1", "weight_decay"),
    ] {
        refused(&spec(keys), says);
    }
}

/// A scheduler stepped once per microbatch (issue 34's mutations) runs the warmup and decay
/// microbatches times too fast: caught on every mesh with gradient accumulation, localized at
/// the learning rate of the first update, and not planned where nothing accumulates.
#[test]
fn a_scheduler_stepped_per_microbatch_is_caught_at_the_learning_rate() {
    let fx = fixture(&spec(SCHEDULED).replace(
        "[mutations]\nselect = []",
        "[mutations]\nselect = [\"lr-scheduler-per-microbatch\"]",
    ));
    let r = run_passing(fx.path());
    let runs: Vec<_> = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["mutation"] == "lr-scheduler-per-microbatch")
        .collect();
    let meshes: std::collections::BTreeSet<&str> =
        runs.iter().map(|j| j["mesh"].as_str().unwrap()).collect();
    assert_eq!(
        meshes.into_iter().collect::<Vec<_>>(),
        ["dp2-tp2-pp2", "pp2"],
        "only meshes with microbatches"
    );
    for j in runs {
        assert_eq!(j["detail"]["localized_as_injected"], true, "{j:#}");
        assert!(
            j["summary"].as_str().unwrap().starts_with("caught"),
            "{j:#}"
        );
    }
}
