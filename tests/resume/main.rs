//! Checkpoints across layouts (issue 38): a `[[resume]]` pair trains its first mesh two steps,
//! saves the whole training state sharded with an index, and its second mesh loads it and
//! trains on. Every pair over dp/tp/sp/pp/cp/ep and world size 1 matches the uninterrupted
//! world-size-1 run; every resumption bug is caught on every pair, by the saved-against-loaded
//! state (named at its first entry) and, without that level, by the continuation alone.
//!
//! One test binary (linking one costs more than these tests' setup): the built-in engine's
//! pairs ([`burn`]), a user's program resuming through the command engine ([`command`]), and
//! `calibrate` over pairs ([`calibrate`]).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod burn;
mod calibrate;
mod command;

const MOE: &str = r#"
[models.moe]
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
expert_bias = true
"#;

const MESHES: &str = r#"
[meshes.dp2]
dp = 2

[meshes.tp2-sp]
tp = 2
sp = true

[meshes.pp2]
pp = 2
microbatches = 2

[meshes.cp2]
cp = 2

[meshes.dp2-tp2-pp2]
dp = 2
tp = 2
pp = 2
microbatches = 2

[meshes.ep2]
ep = 2
dp = 2
"#;

const PAIRS: &str = r#"
[[resume]]
from = ["tp2-sp", "dp2-tp2-pp2", "world1"]
to = ["world1", "pp2", "cp2", "dp2"]
at = 2

[[resume]]
from = ["dp2-tp2-pp2"]
to = ["tp2-sp"]
at = 2

[[resume]]
from = ["ep2"]
to = ["world1", "tp2-sp", "ep2"]
at = 2
"#;

/// Each bug and the state entry the loaded state first differs at.
const BUGS: [(&str, &str); 8] = [
    ("resume-optimizer-moments-dropped", "`optim.exp_avg."),
    ("resume-step-reset", "`optim.step`"),
    ("resume-data-position-reset", "`data.position`"),
    ("resume-rng-stream-reset", "`rng.position`"),
    ("resume-expert-bias-not-saved", "mlp.router.expert_bias`"),
    ("resume-experts-loaded-by-local-index", "mlp.experts."),
    ("resume-tp-shard-wrong-axis", "`layers."),
    ("resume-fc1-split-unchunked", "mlp.gate.weight`"),
];

fn spec(levels: &str, dtypes: &str) -> String {
    format!(
        "[run]\nname = \"resume\"\nseed = 11\nsteps = 5\noracle_steps = 4\nbatch = 8\n\
         optimizer = \"adamw\"\nhidden_dropout = 0.1\nattention_dropout = 0.1\n{}{MOE}{MESHES}{PAIRS}\
         [[matrix]]\nmodels = [\"tiny\"]\nmeshes = [\"tp2-sp\", \"dp2-tp2-pp2\"]\n\
         levels = {levels}\ndtypes = {dtypes}\n\n\
         [[matrix]]\nmodels = [\"moe\"]\nmeshes = [\"ep2\"]\nlevels = {levels}\ndtypes = {dtypes}\n\n\
         [mutations]\nselect = [{}]\n",
        tiny_model!(),
        BUGS.map(|(b, _)| format!("\"{b}\"")).join(", ")
    )
}

/// The jobs that ran `bug` in `results`; a bug never planned fails the test.
fn bug_jobs<'a>(results: &'a serde_json::Value, bug: &str) -> Vec<&'a serde_json::Value> {
    let runs: Vec<_> = results["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["mutation"] == bug)
        .collect();
    assert!(!runs.is_empty(), "{bug} never planned");
    runs
}
