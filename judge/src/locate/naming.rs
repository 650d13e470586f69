//! A traced value's place and meaning in words: its step, row block, phase and what it is, from
//! its trace key (`s{step}.{site}@{copy}`).

use meshparity_specs::tolerance::GRAD_NORM;

use super::{Site, TraceEntry};

/// A trace key's site path: `s1.layers.0.out@1` → `layers.0.out`.
pub(super) fn path_of(key: &str) -> &str {
    let key = key.rsplit_once('@').map_or(key, |(k, _)| k);
    key.strip_prefix('s')
        .and_then(|s| s.split_once('.'))
        .map_or(key, |(_, p)| p)
}

/// A trace key's step and site path: `s1.layers.0.out@1` → `(1, "layers.0.out")` (step 0
/// where the key has none).
pub fn step_and_path(key: &str) -> (usize, &str) {
    let key = key.rsplit_once('@').map_or(key, |(k, _)| k);
    key.strip_prefix('s')
        .and_then(|s| s.split_once('.'))
        .and_then(|(n, p)| Some((n.parse().ok()?, p)))
        .unwrap_or((0, key))
}

pub(super) fn site(
    e: &TraceEntry,
    microbatches: usize,
    block: Option<usize>,
    value: f64,
    limit: f64,
) -> Site {
    let (stepped, copy) = match e.key.rsplit_once('@') {
        Some((k, n)) => (k, n.parse().ok()),
        None => (e.key.as_str(), None),
    };
    let (step, path) = stepped
        .strip_prefix('s')
        .and_then(|s| s.split_once('.'))
        .and_then(|(n, p)| Some((n.parse().ok()?, p)))
        .unwrap_or((0, stepped));
    let mbs = microbatches.max(1);
    Site {
        step,
        replica: block.map(|b| b / mbs),
        microbatch: block.map(|b| b % mbs),
        phase: phase(path).to_owned(),
        site: path.to_owned(),
        copy,
        what: what(path).to_owned(),
        metric: "relative_l2".to_owned(),
        value,
        limit,
        bound: None,
    }
}

fn phase(path: &str) -> &'static str {
    if path.starts_with("adam.") {
        "optimizer"
    } else if path.contains(".bwd.") {
        "backward"
    } else if path.starts_with("grad.")
        || path.starts_with("grad_norm")
        || path == "lr"
        || path.contains(".expert_bias")
    {
        "gradients"
    } else {
        "forward"
    }
}

/// What a site's value is, in words.
fn what(path: &str) -> &'static str {
    let ends = |s: &str| path.ends_with(s);
    if path.starts_with("pp.") {
        "activation received from the previous stage"
    } else if ends(".expert_bias.load") {
        "expert load moving the score-correction bias (shares of the global batch's tokens)"
    } else if ends(".expert_bias") {
        "score-correction bias after the step's update"
    } else if path == GRAD_NORM {
        "global gradient norm before clipping, as this rank computed it"
    } else if path == "lr" {
        "learning rate of the step's update, as each rank's optimizer holds it"
    } else if path.starts_with("param.") {
        "parameter as the step computes with it (unsharded, on a sharded mesh)"
    } else if path.starts_with("adam.") {
        "AdamW first moment after the step's update (merged over its shards)"
    } else if path.starts_with("loss.tokens") {
        "loss normalizer: the global token count"
    } else if path.starts_with("grad.") && ends(".accumulated") {
        "gradient as accumulated, before its reductions"
    } else if path.starts_with("grad.") {
        "gradient as finalized, after its reductions"
    } else if ends(".fwd.in") {
        "input of the collective: what the computation before it produced"
    } else if ends(".fwd.out") {
        "output of the collective"
    } else if ends(".bwd.in") {
        "gradient arriving at the collective: what the backward before it produced"
    } else if ends(".bwd.out") {
        "gradient after the collective's backward"
    } else if ends(".out") {
        "layer output"
    } else {
        "traced value"
    }
}
