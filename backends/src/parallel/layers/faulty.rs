//! The layer math of the computation faults: the same functions as `llama::layers` with one
//! thing wrong, each built so that only what the catalog says differs (a backward fault leaves
//! the forward value bit-identical).

use burn::tensor::activation::silu;
use burn::tensor::{Tensor, TensorData};

use crate::data::Batch;
use crate::llama::layers::{linear, rope_at, NORM_EPS};
use crate::parallel::fault::{NormFault, TokenCount, WRONG_EPS};
use crate::positions::Positions;

/// RMSNorm with the wrong epsilon or the wrong power.
pub fn rms_norm(x: Tensor<3>, weight: Tensor<2>, fault: NormFault) -> Tensor<3> {
    let h = x.dims()[2];
    let (ms, eps) = match fault {
        NormFault::Epsilon => (x.clone().powi_scalar(2).mean_dim(2), WRONG_EPS),
        NormFault::Power => (x.clone().abs().mean_dim(2), NORM_EPS),
    };
    x * (ms + eps).sqrt().recip() * weight.reshape([1, 1, h])
}

/// SwiGLU whose product's backward hands the gate branch grad·silu(gate) instead of grad·up:
/// the forward is g·u exactly (`g·g̃ − (g·g)̃` is exactly zero), the backward of `g` sees `g`.
pub fn swiglu_wrong_operand(
    x: Tensor<3>,
    gate: Tensor<2>,
    up: Tensor<2>,
    down: Tensor<2>,
) -> Tensor<3> {
    let g = silu(linear(x.clone(), gate));
    let u = linear(x, up);
    let wrong = g.clone() * g.clone().detach() - (g.clone() * g.clone()).detach();
    linear(g.detach() * u + wrong, down)
}

/// RoPE whose backward returns its two half-gradients swapped: the value of `rope(x)`, the
/// vector-Jacobian product of `rope(swap(x))`, which is swap(ropeᵀ g).
pub fn rope_swapped_backward(x: Tensor<4>, positions: &[Vec<usize>], batch: &Batch) -> Tensor<4> {
    let half = x.dims()[3] / 2;
    let swapped = Tensor::cat(
        vec![
            x.clone().narrow(3, half, half),
            x.clone().narrow(3, 0, half),
        ],
        3,
    );
    let through = rope_at(swapped, positions, batch);
    rope_at(x, positions, batch).detach() + (through.clone() - through.detach())
}

/// Ring attention's partial outputs summed as they are, without the log-sum-exp weights that
/// make them one softmax over all keys.
pub fn unweighted_merge(blocks: Vec<(Tensor<4>, Tensor<4>)>) -> Tensor<4> {
    blocks
        .into_iter()
        .map(|(o, _)| o)
        .reduce(|a, b| a + b)
        .expect("a ring has steps")
}

/// Ring attention blocks whose backward is the first step's at every step: each later block
/// keeps its value (the forward is bit-identical) but takes its gradient through block 0,
/// computed against the rank's own K/V, as a ring backward that reads the K/V it saved at the
/// first step does (diffusers#14265). The received chunks get no gradient at all.
pub fn stale_kv_backward(blocks: Vec<(Tensor<4>, Tensor<4>)>) -> Vec<(Tensor<4>, Tensor<4>)> {
    let (o0, l0) = blocks[0].clone();
    let through =
        |own: Tensor<4>, first: Tensor<4>| own.detach() + (first.clone() - first.detach());
    blocks
        .into_iter()
        .enumerate()
        .map(|(j, (o, l))| match j {
            0 => (o, l),
            _ => (through(o, o0.clone()), through(l, l0.clone())),
        })
        .collect()
}

/// `x` plus fixed noise whose L2 norm is `eps` times `x`'s (a value corrupted by a device that
/// miscomputes silently). The noise is a pure function of `stream` and the shape, the same on
/// every step, and a constant to autodiff: gradients flow through `x` unchanged.
pub fn corrupted(x: Tensor<3>, eps: f64, stream: &str) -> Tensor<3> {
    let dims = x.dims();
    let noise = crate::rng::uniform(0, stream, dims.iter().product(), 1.0);
    let norm = noise.iter().map(|v| v * v).sum::<f64>().sqrt();
    let unit: Vec<f64> = noise
        .iter()
        .map(|v| v / norm.max(f64::MIN_POSITIVE))
        .collect();
    let unit = Tensor::<3>::from_data(TensorData::new(unit, dims), (&x.device(), x.dtype()));
    let size = x.clone().detach().powi_scalar(2).sum().sqrt() * eps;
    x + unit * size.reshape([1, 1, 1])
}

/// A rank's per-token load-balance weights ([rows, E]) with one of its token counts misread:
/// each row's weights scaled by [`TokenCount::factor`] of the rank's own real tokens of that
/// row (its `positions` below the row's length) and the row's.
pub fn misread_token_count(
    weights: &mut [f64],
    experts: usize,
    positions: &Positions,
    lengths: &[usize],
    wrong: TokenCount,
) {
    for (row, &len) in lengths.iter().enumerate() {
        let own = positions.row(row).iter().filter(|&&p| p < len).count();
        let factor = wrong.factor(own, len);
        for w in &mut weights[row * experts..(row + 1) * experts] {
            *w *= factor;
        }
    }
}
