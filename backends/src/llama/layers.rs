//! The layers of the dense transformer as plain functions of tensors.
//!
//! Functions, not burn `Module`s: the parallel versions must own exactly which shard of which
//! weight they see and where every collective sits, and the single-device oracle is the same
//! code called with whole weights.

use burn::tensor::activation::{log_softmax, silu, softmax};
use burn::tensor::{Bool, Int, Tensor, TensorData};

use crate::data::Batch;
use crate::positions::of_row;

/// Epsilon of every RMSNorm.
pub const NORM_EPS: f64 = 1e-5;
/// RoPE base frequency.
pub const ROPE_THETA: f64 = 10_000.0;

/// RMSNorm over the last dimension.
///
/// # Shapes
/// x: [B, S, H], weight: [1, H] → [B, S, H]
pub fn rms_norm(x: Tensor<3>, weight: Tensor<2>) -> Tensor<3> {
    let h = x.dims()[2];
    let ms = x.clone().powi_scalar(2).mean_dim(2);
    let inv = (ms + NORM_EPS).sqrt().recip();
    x * inv * weight.reshape([1, 1, h])
}

/// Rotary embedding (half-split convention) at the given positions of `batch`'s rows (a
/// context-parallel rank's chunks are not contiguous): one list for every row, or one per row
/// ([`crate::positions::Positions::lists`]). A packed row's positions restart at each
/// document's first token, so each row gets its own table then.
///
/// # Shapes
/// x: [B, N, S, D] with D even, positions: 1 or B lists of S → [B, N, S, D]
pub fn rope_at(x: Tensor<4>, positions: &[Vec<usize>], batch: &Batch) -> Tensor<4> {
    let [b, _, s, d] = x.dims();
    let half = d / 2;
    let rows: Vec<Vec<usize>> = if batch.packed() {
        (0..b)
            .map(|r| {
                let at = |&p: &usize| p - batch.document_start(r, p);
                of_row(positions, r).iter().map(at).collect()
            })
            .collect()
    } else {
        positions.to_vec()
    };
    let mut cos = Vec::with_capacity(rows.len() * s * half);
    let mut sin = Vec::with_capacity(rows.len() * s * half);
    for &p in rows.iter().flatten() {
        for i in 0..half {
            let freq = ROPE_THETA.powf(-(2.0 * i as f64) / d as f64);
            let angle = p as f64 * freq;
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    let (device, dtype, n) = (x.device(), x.dtype(), rows.len());
    let table = |v: Vec<f64>| {
        Tensor::<2>::from_data(TensorData::new(v, [n * s, half]), (&device, dtype))
            .reshape([n, 1, s, half])
    };
    let (cos, sin) = (table(cos), table(sin));
    let x1 = x.clone().narrow(3, 0, half);
    let x2 = x.narrow(3, half, half);
    Tensor::cat(
        vec![
            x1.clone() * cos.clone() - x2.clone() * sin.clone(),
            x1 * sin + x2 * cos,
        ],
        3,
    )
}

/// Causal self-attention mask over `batch`'s whole rows that also hides padded keys and keys
/// of another document: true where attention is *not* allowed.
///
/// # Shapes
/// → [B, 1, S, S]
pub fn attention_mask(batch: &Batch, device: &burn::tensor::Device) -> Tensor<4, Bool> {
    let all = [(0..batch.seq_len).collect()];
    attention_mask_at(batch, &all, &all, device)
}

/// [`attention_mask`] between queries and keys at the given absolute positions, one list for
/// every row or one per row (`batch`'s lengths and document starts are the whole rows').
///
/// # Shapes
/// → [B, 1, Sq, Sk]
pub fn attention_mask_at(
    batch: &Batch,
    queries: &[Vec<usize>],
    keys: &[Vec<usize>],
    device: &burn::tensor::Device,
) -> Tensor<4, Bool> {
    let b = batch.lengths.len();
    let (sq, sk) = (queries[0].len(), keys[0].len());
    let mut blocked = Vec::with_capacity(b * sq * sk);
    for (row, &len) in batch.lengths.iter().enumerate() {
        let keys = of_row(keys, row);
        for &q in of_row(queries, row) {
            let first = batch.document_start(row, q);
            blocked.extend(keys.iter().map(|&k| k > q || k >= len || k < first));
        }
    }
    Tensor::<4, Bool>::from_data(TensorData::new(blocked, [b, 1, sq, sk]), device)
}

/// Grouped-query attention core: softmax(q kᵀ/√d) v with kv heads shared by groups of query
/// heads. q and k arrive rotated.
///
/// # Shapes
/// q: [B, Nq, S, D], k/v: [B, Nkv, S, D], mask: [B, 1, S, S], keep: [B, Nq, S, S] →
/// [B, Nq, S, D]
pub fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: Tensor<4, Bool>,
    keep: Option<Tensor<4>>,
) -> Tensor<4> {
    let group = group(&q, &k);
    dropped(softmax(scores(q, k, mask), 3), keep).matmul(expand_kv(v, group))
}

/// Attention probabilities times dropout's multipliers, where dropout acts.
fn dropped(probs: Tensor<4>, keep: Option<Tensor<4>>) -> Tensor<4> {
    match keep {
        Some(keep) => probs * keep,
        None => probs,
    }
}

/// Attention of the queries over one block of keys (a ring step of context parallelism): the
/// block's softmax-weighted values and the log-sum-exp of its scores, from which blocks merge
/// exactly ([`merge_blocks`]). Dropout on the probabilities drops within the block: the merge
/// rescales each block's output linearly, so a block's mask is the whole mask's block, as in
/// flash attention.
///
/// # Shapes
/// q: [B, Nq, Sq, D], k/v: [B, Nkv, Sk, D], mask: [B, 1, Sq, Sk], keep: [B, Nq, Sq, Sk] →
/// ([B, Nq, Sq, D], [B, Nq, Sq, 1])
pub fn attention_block(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: Tensor<4, Bool>,
    keep: Option<Tensor<4>>,
) -> (Tensor<4>, Tensor<4>) {
    let group = group(&q, &k);
    let scores = scores(q, k, mask);
    // The shift only keeps exp() in range; d lse/d scores is the softmax with or without it.
    let max = scores.clone().max_dim(3).detach();
    let e = (scores - max.clone()).exp();
    let sum = e.clone().sum_dim(3);
    let out = dropped(e / sum.clone(), keep).matmul(expand_kv(v, group));
    (out, max + sum.log())
}

/// Online-softmax merge of per-block attention outputs: weight each block by
/// exp(lse_j − lse), lse = log Σ_j exp(lse_j). Exactly softmax over all keys at once.
///
/// # Shapes
/// blocks: ([B, Nq, Sq, D], [B, Nq, Sq, 1]) each → [B, Nq, Sq, D]
pub fn merge_blocks(blocks: Vec<(Tensor<4>, Tensor<4>)>) -> Tensor<4> {
    let lses: Vec<Tensor<4>> = blocks.iter().map(|(_, l)| l.clone()).collect();
    let max = Tensor::cat(lses.clone(), 3).max_dim(3).detach();
    let total = lses
        .iter()
        .map(|l| (l.clone() - max.clone()).exp())
        .reduce(|a, b| a + b)
        .expect("a ring has steps")
        .log()
        + max;
    blocks
        .into_iter()
        .map(|(o, l)| o * (l - total.clone()).exp())
        .reduce(|a, b| a + b)
        .expect("a ring has steps")
}

fn group(q: &Tensor<4>, k: &Tensor<4>) -> usize {
    q.dims()[1] / k.dims()[1]
}

/// What a hidden score is filled with: far below any real score, and finite in the scores'
/// dtype. f16 tops out at 65504, where -1e30 is -inf: a block of the CP ring whose keys are all
/// hidden (a future chunk, another document) then has max −inf and its shift −inf − (−inf)
/// is NaN — every f16 run under CP over packed rows trained NaN. With a finite fill such a
/// block's log-sum-exp sits ~3e4 below the real ones and the merge weighs it exp(−3e4) = 0.
fn hidden_score(dtype: burn::tensor::DType) -> f64 {
    if dtype == burn::tensor::DType::F16 {
        -3.0e4
    } else {
        -1e30
    }
}

/// Scaled, masked scores q kᵀ/√d with kv heads repeated for their query-head group.
fn scores(q: Tensor<4>, k: Tensor<4>, mask: Tensor<4, Bool>) -> Tensor<4> {
    let [_, nq, _, d] = q.dims();
    let group = group(&q, &k);
    let k = expand_kv(k, group);
    let scores = q.matmul(k.swap_dims(2, 3)) / (d as f64).sqrt();
    let fill = hidden_score(scores.dtype());
    scores.mask_fill(mask.repeat_dim(1, nq), fill)
}

/// kv heads shared by groups of query heads, repeated to one per query head.
fn expand_kv(t: Tensor<4>, group: usize) -> Tensor<4> {
    if group == 1 {
        return t;
    }
    let [b, n, s, d] = t.dims();
    t.unsqueeze_dim::<5>(2)
        .repeat_dim(2, group)
        .reshape([b, n * group, s, d])
}

/// x·W for every token, as one [B·S, H]×[H, O] product. The batched [B, S, H]×[1, H, O] form
/// runs B products of S rows each and, backward, materializes a [B, H, O] weight gradient and
/// sums it over B: on a 4-layer hidden-512 llama one training step took 20% longer that way.
///
/// # Shapes
/// x: [B, S, H], w: [H, O] → [B, S, O]
pub fn linear(x: Tensor<3>, w: Tensor<2>) -> Tensor<3> {
    let [b, s, h] = x.dims();
    let o = w.dims()[1];
    x.reshape([b * s, h]).matmul(w).reshape([b, s, o])
}

/// SwiGLU MLP: (silu(x·Wg) ⊙ x·Wu)·Wd.
///
/// # Shapes
/// x: [B, S, H], gate/up: [H, F], down: [F, H] → [B, S, H]
pub fn swiglu(x: Tensor<3>, gate: Tensor<2>, up: Tensor<2>, down: Tensor<2>) -> Tensor<3> {
    let g = silu(linear(x.clone(), gate));
    let u = linear(x, up);
    linear(g * u, down)
}

/// The loss's terms beyond the plain cross-entropy, as a run sets them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LossTerms {
    /// Label smoothing ε (torch's `label_smoothing`).
    pub label_smoothing: f64,
    /// The z-loss weight w (PaLM's): w · (log Σ_j exp z_j)² per counted token.
    pub z_loss: f64,
}

impl LossTerms {
    pub fn of(t: &meshparity_specs::Training) -> Self {
        Self {
            label_smoothing: t.label_smoothing.unwrap_or(0.0),
            z_loss: t.z_loss.unwrap_or(0.0),
        }
    }
}

/// Sum of token cross-entropies (not a mean: normalization is the caller's, by the *global*
/// token count) and the number of tokens that counted. With label smoothing ε each token's
/// target is 1 − ε on its label and ε/V on every entry of the vocabulary (torch's
/// `label_smoothing`): −(1 − ε)·log p_label − ε/V · Σ_j log p_j. With a z-loss weight w each
/// token adds w · (log Σ_j exp z_j)².
///
/// # Shapes
/// logits: [B, S, V], targets: [B·S] (with `IGNORE`) → scalar [1]
pub fn cross_entropy_sum(logits: Tensor<3>, targets: &[i64], terms: LossTerms) -> Tensor<1> {
    let smoothing = terms.label_smoothing;
    let [b, s, v] = logits.dims();
    let device = logits.device();
    let keep: Vec<f64> = targets
        .iter()
        .map(|&t| if t == crate::data::IGNORE { 0.0 } else { 1.0 })
        .collect();
    let idx: Vec<i64> = targets.iter().map(|&t| t.max(0)).collect();
    let idx = Tensor::<2, Int>::from_data(TensorData::new(idx, [b * s, 1]), &device);
    let flat = logits.reshape([b * s, v]);
    let logp = log_softmax(flat.clone(), 1);
    let picked = logp.clone().gather(1, idx).reshape([b * s]);
    // log Σ exp z = z_j − log p_j at any j (the first): the z-loss's normalizer.
    let lse = (flat.narrow(1, 0, 1) - logp.clone().narrow(1, 0, 1)).reshape([b * s]);
    let picked = if smoothing > 0.0 {
        let uniform = logp.sum_dim(1).reshape([b * s]);
        picked * (1.0 - smoothing) + uniform * (smoothing / v as f64)
    } else {
        picked
    };
    // The z-loss enters as a negative log-likelihood would: subtracted before the negation.
    let picked = if terms.z_loss > 0.0 {
        picked - lse.powi_scalar(2) * terms.z_loss
    } else {
        picked
    };
    let keep = Tensor::<1>::from_data(TensorData::new(keep, [b * s]), (&device, picked.dtype()));
    (picked * keep).sum().neg()
}

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, TensorData};

    use super::*;

    /// A query's keys over two ring blocks, the first all hidden (a future chunk): merged in f16
    /// the output is finite and the second block's attention, as in f32. With -1e30 as the fill
    /// (−inf in f16) the hidden block's shift was −inf − (−inf) and the merge NaN.
    #[test]
    fn a_block_of_hidden_keys_merges_to_nothing_in_f16() {
        let device = Default::default();
        let t = |v: Vec<f32>, dtype| {
            Tensor::<4>::from_data(TensorData::new(v, [1, 1, 2, 2]), (&device, dtype))
        };
        let mask = |hidden: [bool; 4]| {
            Tensor::<4, Bool>::from_data(TensorData::new(hidden.to_vec(), [1, 1, 2, 2]), &device)
        };
        let merged = |dtype| {
            let q = t(vec![0.3, -0.2, 0.5, 0.1], dtype);
            let (k1, v1) = (t(vec![0.4, 0.2, -0.1, 0.6], dtype), t(vec![9.0; 4], dtype));
            let (k2, v2) = (
                t(vec![0.1, -0.3, 0.2, 0.2], dtype),
                t(vec![1.0, 2.0, 3.0, 4.0], dtype),
            );
            let hidden = attention_block(q.clone(), k1, v1, mask([true; 4]), None);
            let causal = attention_block(q, k2, v2, mask([false, true, false, false]), None);
            let out = merge_blocks(vec![hidden, causal])
                .into_data()
                .convert::<f32>();
            out.try_to_vec::<f32>().unwrap()
        };
        let (f16, f32) = (merged(DType::F16), merged(DType::F32));
        assert!(f16.iter().all(|x| x.is_finite()), "{f16:?}");
        for (a, b) in f16.iter().zip(&f32) {
            assert!((a - b).abs() < 1e-2, "f16 {f16:?} against f32 {f32:?}");
        }
        // The hidden block's values (9) take no weight.
        assert!(f32.iter().all(|&x| x < 5.0), "{f32:?}");
    }
}
