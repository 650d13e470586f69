//! The whole dense model on one device: the oracle every mesh is compared against.

use burn::tensor::{Device, Int, Tensor, TensorData};
use meshparity_specs::ModelConfig;

use super::layers::{attention, attention_mask, cross_entropy_sum, rms_norm, rope, swiglu};
use super::params::Params;
use crate::data::Batch;

/// What a forward pass yields.
pub struct Forward {
    /// [B, S, V]
    pub logits: Tensor<3>,
    /// Σ token cross-entropy over counted tokens, shape [1].
    pub loss_sum: Tensor<1>,
}

/// Forward pass of the full model over a batch.
///
/// # Shapes
/// batch: [B, S] tokens → logits [B, S, V]
pub fn forward(c: &ModelConfig, p: &Params, batch: &Batch, device: &Device) -> Forward {
    let (b, s) = (batch.batch, batch.seq_len);
    let h = c.hidden as usize;
    let (nq, nkv) = (c.heads as usize, c.kv_heads as usize);
    let hd = h / nq;
    let tokens =
        Tensor::<1, Int>::from_data(TensorData::new(batch.tokens.clone(), [b * s]), device);
    let mut x: Tensor<3> = p.get("embed.weight").select(0, tokens).reshape([b, s, h]);
    let mask = attention_mask(&batch.lengths, s, device);
    for l in 0..c.layers {
        let w = |name: &str| p.get(&format!("layers.{l}.{name}"));
        let hn = rms_norm(x.clone(), w("attn_norm.weight"));
        let heads = |t: Tensor<3>, n: usize| t.reshape([b, s, n, hd]).swap_dims(1, 2);
        let q = heads(hn.clone().matmul(w("attn.q.weight").unsqueeze()), nq);
        let k = heads(hn.clone().matmul(w("attn.k.weight").unsqueeze()), nkv);
        let v = heads(hn.matmul(w("attn.v.weight").unsqueeze()), nkv);
        let a = attention(rope(q, 0), rope(k, 0), v, mask.clone());
        let a: Tensor<3> = a.swap_dims(1, 2).reshape([b, s, nq * hd]);
        x = x + a.matmul(w("attn.o.weight").unsqueeze());
        let hn = rms_norm(x.clone(), w("mlp_norm.weight"));
        x = x + swiglu(
            hn,
            w("mlp.gate.weight"),
            w("mlp.up.weight"),
            w("mlp.down.weight"),
        );
    }
    let x = rms_norm(x, p.get("norm.weight"));
    let logits = x.matmul(p.get("output.weight").unsqueeze());
    let loss_sum = cross_entropy_sum(logits.clone(), &batch.targets);
    Forward { logits, loss_sum }
}
