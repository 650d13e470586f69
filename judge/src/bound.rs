//! A second opinion on localization's limits, from error analysis. TTrace (arXiv 2506.09280,
//! theorem 5.3) bounds the relative error a correct parallel run may carry at layer `l` of `L`
//! by `k · C^depth · eps`, the depth counted from the output for what the backward computes
//! (`L + 1 − l`) — and here, by the same argument, from the input for the forward (`l`).
//! Megatron-LM's CI checks gradients with `k = 4`, `C = 1.03`
//! (tests/functional_tests/python_test_utils/test_optimizer_grads_match.py). It is reported
//! beside each traced site's calibrated limit, never used to judge: the limits are measured on
//! this engine, the bound says what the theory allows, and a user sees both.

use meshparity_specs::DType;

/// The hidden constant and the per-layer growth Megatron-LM's CI uses.
pub const K: f64 = 4.0;
pub const C: f64 = 1.03;

/// The unit round-off's spacing of `dtype` (torch's `finfo.eps`).
pub fn machine_epsilon(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        DType::F32 => f32::EPSILON as f64,
        DType::F16 => 2f64.powi(-10),
        DType::Bf16 => 2f64.powi(-7),
    }
}

/// The model's layer count as a trace shows it: one more than the largest `layers.N`.
pub fn layers_of<'a>(keys: impl Iterator<Item = &'a str>) -> usize {
    keys.filter_map(|k| {
        let at = k.find("layers.")? + "layers.".len();
        k[at..].split('.').next()?.parse::<usize>().ok()
    })
    .max()
    .map_or(0, |n| n + 1)
}

/// The bound at a site path (`layers.0.mlp.in.bwd.out`, `grad.embed.weight.dp`, …) of a model
/// with `layers` layers: the embedding is layer 0, `layers.N` is N + 1, the head and the loss
/// L + 1.
pub fn at(path: &str, layers: usize, dtype: DType) -> f64 {
    let l = match path
        .find("layers.")
        .and_then(|at| path[at + 7..].split('.').next()?.parse::<usize>().ok())
    {
        Some(n) => n + 1,
        None if path.contains("embed") => 0,
        None => layers + 1,
    };
    let depth = if is_backward(path) {
        layers + 1 - l.min(layers + 1)
    } else {
        l
    };
    K * C.powi(depth as i32) * machine_epsilon(dtype)
}

/// Whether a site's error starts at the output (what the backward computes: its values, the
/// gradients, the optimizer's moments made from them, the learning rate the step applies)
/// rather than at the input.
pub fn is_backward(path: &str) -> bool {
    path.contains(".bwd.") || path.starts_with("grad") || path.starts_with("adam.") || path == "lr"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Megatron's figures: bf16 at layer 1 of 32 is 4 · 1.03³² · 2⁻⁷.
    #[test]
    fn the_bound_grows_with_depth_from_where_errors_start() {
        let grad = at("grad.layers.0.attn.q.weight.dp", 32, DType::Bf16);
        assert!((grad - 4.0 * 1.03f64.powi(32) / 128.0).abs() < 1e-12);
        let top = at("grad.layers.31.attn.q.weight.dp", 32, DType::Bf16);
        assert!(top < grad);
        let fwd0 = at("layers.0.attn.in.fwd.in", 32, DType::F32);
        let fwd9 = at("layers.9.attn.in.fwd.in", 32, DType::F32);
        assert!(fwd0 < fwd9);
        assert_eq!(
            layers_of(["s0.layers.1.out", "s1.layers.3.mlp.in.fwd.in"].into_iter()),
            4
        );
    }
}
