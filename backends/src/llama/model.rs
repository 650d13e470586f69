//! The whole model on one device: the oracle every mesh is compared against.

use burn::tensor::{Device, Int, Tensor, TensorData};
use meshparity_specs::ModelConfig;

use super::balance;
use super::layers::{
    attention, attention_mask, cross_entropy_sum, linear, rms_norm, rope_at, swiglu, LossTerms,
};
use super::moe::{self, Decided};
use super::params::{mtp_layer, Params};
use crate::data::{Batch, IGNORE};
use crate::dropout::{Block, Dropout, Site};

/// What a forward pass yields.
pub struct Forward {
    /// [B, S, V]
    pub logits: Tensor<3>,
    /// Σ token cross-entropy over counted tokens, shape [1] (with a multi-token prediction
    /// layer, plus [`meshparity_specs::MTP_LOSS_SCALE`] of its Σ over the tokens it counts).
    pub loss_sum: Tensor<1>,
    /// The moe family's auxiliary losses (already normalized), summed over layers.
    pub aux: Option<Aux>,
}

/// The auxiliary losses of the moe family and what routing chose.
pub struct Aux {
    /// Load-balance loss, shape [1].
    pub load_balance: Tensor<1>,
    /// Router z-loss, shape [1].
    pub z: Tensor<1>,
    /// Per layer: what routing decided.
    pub routing: Vec<Layer>,
}

/// One layer's routing of the batch, tokens row-major.
pub struct Layer {
    /// What top-k selected by: scores plus bias, [T·E] row-major.
    pub selected: Vec<f64>,
    /// Each token's experts and the slots their experts kept.
    pub decided: Decided,
}

/// Forward pass of the full model over a batch.
///
/// # Shapes
/// batch: [B, S] tokens → logits [B, S, V]
pub fn forward(c: &ModelConfig, p: &Params, batch: &Batch, device: &Device) -> Forward {
    forward_with(c, p, batch, device, LossTerms::default(), None)
}

/// [`forward`] with the loss's label smoothing and z-loss ([`cross_entropy_sum`]) and the
/// step's dropout (masks at every global position: [`Dropout::mask`]).
pub fn forward_with(
    c: &ModelConfig,
    p: &Params,
    batch: &Batch,
    device: &Device,
    terms: LossTerms,
    dropout: Option<&Dropout>,
) -> Forward {
    let (b, s) = (batch.batch, batch.seq_len);
    let h = c.hidden as usize;
    let (nq, nkv) = (c.heads as usize, c.kv_heads as usize);
    let hd = h / nq;
    let tokens =
        Tensor::<1, Int>::from_data(TensorData::new(batch.tokens.clone(), [b * s]), device);
    let mut x: Tensor<3> = p.get("embed.weight").select(0, tokens).reshape([b, s, h]);
    let mask = attention_mask(batch, device);
    // Every row's positions and hidden units are all of them: one list for every row.
    let rows: Vec<usize> = (0..b).collect();
    let (positions, hidden) = (
        [(0..s).collect::<Vec<usize>>()],
        [(0..h).collect::<Vec<usize>>()],
    );
    let all_heads: Vec<usize> = (0..nq).collect();
    let on = (device, x.dtype());
    // Dropout of layer l's `site` over the whole batch, its axes' global indices all of them.
    let dropped = |t: Tensor<3>, site: Site, l: u32| match dropout.filter(|d| d.p(site) > 0.0) {
        Some(d) => {
            let block = Block {
                rows: &rows,
                heads: &[],
                queries: &positions,
                keys: &hidden,
            };
            t * d.keep::<3>(site, l, &block, 0, on)
        }
        None => t,
    };
    let mut aux = c.family.has_experts().then(|| Aux {
        load_balance: Tensor::<1>::zeros([1], (device, x.dtype())),
        z: Tensor::<1>::zeros([1], (device, x.dtype())),
        routing: Vec::new(),
    });
    let layer = |l: u32, mut x: Tensor<3>, aux: Option<&mut Aux>| {
        let w = |name: &str| p.get(&format!("layers.{l}.{name}"));
        let hn = rms_norm(x.clone(), w("attn_norm.weight"));
        let heads = |t: Tensor<3>, n: usize| t.reshape([b, s, n, hd]).swap_dims(1, 2);
        let q = heads(linear(hn.clone(), w("attn.q.weight")), nq);
        let k = heads(linear(hn.clone(), w("attn.k.weight")), nkv);
        let v = heads(linear(hn, w("attn.v.weight")), nkv);
        let keep = dropout.filter(|d| d.attention > 0.0).map(|d| {
            let block = Block {
                rows: &rows,
                heads: &all_heads,
                queries: &positions,
                keys: &positions,
            };
            d.keep::<4>(Site::Attention, l, &block, 0, on)
        });
        let rope = |t| rope_at(t, &positions, batch);
        let a = attention(rope(q), rope(k), v, mask.clone(), keep);
        let a: Tensor<3> = a.swap_dims(1, 2).reshape([b, s, nq * hd]);
        x = x + dropped(linear(a, w("attn.o.weight")), Site::AttnResidual, l);
        let hn = rms_norm(x.clone(), w("mlp_norm.weight"));
        let mlp = match aux {
            Some(aux) => moe_mlp(c, p, l, hn, batch, aux),
            None => swiglu(
                hn,
                w("mlp.gate.weight"),
                w("mlp.up.weight"),
                w("mlp.down.weight"),
            ),
        };
        x + dropped(mlp, Site::MlpResidual, l)
    };
    for l in 0..c.layers {
        x = layer(l, x, aux.as_mut());
    }
    // Tied: the output head is the embedding, transposed ([V, H] → [H, V]).
    let head = if c.tied() {
        p.get("embed.weight").transpose()
    } else {
        p.get("output.weight")
    };
    let logits = linear(rms_norm(x.clone(), p.get("norm.weight")), head.clone());
    let mut loss_sum = cross_entropy_sum(logits.clone(), &batch.targets, terms);
    if c.mtp() {
        let mtp = mtp_sum((c, p, batch, terms), x, head, |l, m| layer(l, m, None));
        loss_sum = loss_sum + mtp * meshparity_specs::MTP_LOSS_SCALE;
    }
    Forward {
        logits,
        loss_sum,
        aux,
    }
}

/// DeepSeek-V3's MTP at depth 1 on the last hidden state `x` (before the final norm): the next
/// token's embedding and `x`, each normed, concatenated ([enorm(e); hnorm(h)], Megatron's
/// order) and projected, through the MTP layer (`layer`), its norm and the shared `head`,
/// predicting the token after next. Its Σ cross-entropy over the tokens it counts.
fn mtp_sum(
    (c, p, batch, terms): (&ModelConfig, &Params, &Batch, LossTerms),
    x: Tensor<3>,
    head: Tensor<2>,
    layer: impl Fn(u32, Tensor<3>) -> Tensor<3>,
) -> Tensor<1> {
    let [b, s, h] = x.dims();
    let next = batch.shifted();
    let ids =
        Tensor::<1, Int>::from_data(TensorData::new(next.tokens.clone(), [b * s]), &x.device());
    let e: Tensor<3> = p.get("embed.weight").select(0, ids).reshape([b, s, h]);
    let joined = Tensor::cat(
        vec![
            rms_norm(e, p.get("mtp.enorm.weight")),
            rms_norm(x, p.get("mtp.hnorm.weight")),
        ],
        2,
    );
    let m = layer(mtp_layer(c), linear(joined, p.get("mtp.eh_proj.weight")));
    let logits = linear(rms_norm(m, p.get("mtp.norm.weight")), head);
    cross_entropy_sum(logits, &next.targets, terms)
}

/// Layer `l`'s mixture of experts over the whole batch, its auxiliary losses added to `aux`.
fn moe_mlp(
    c: &ModelConfig,
    p: &Params,
    l: u32,
    hn: Tensor<3>,
    batch: &Batch,
    aux: &mut Aux,
) -> Tensor<3> {
    let [b, s, h] = hn.dims();
    let (e, k) = (
        c.experts.unwrap_or(1) as usize,
        c.top_k.unwrap_or(1) as usize,
    );
    let w = |name: &str| p.get(&format!("layers.{l}.mlp.{name}"));
    let x = hn.reshape([b * s, h]);
    let bias = router_bias(c, p, l);
    let router = moe::Router {
        score: c.moe.router(),
        k,
        bias: bias.as_deref(),
    };
    let (mut routed, selected) = moe::route(x.clone(), w("router.weight"), router, None);
    let positions = crate::positions::Positions::shared((0..s).collect());
    let how = moe::Dispatch::of(c.moe.router(), k);
    if let Some(cap) = c.moe.capacity() {
        let weights = moe::slot_weights(
            routed.scores.clone(),
            &routed.choices,
            how.renormalize,
            None,
        );
        routed.kept = Some(balance::kept_slots(
            &routed.choices,
            &moe::values(&weights),
            (b, &positions),
            &batch.lengths,
            e,
            cap,
        ));
    }
    let expert = |i: usize| {
        let n = |part: &str| w(&format!("experts.{i}.{part}.weight"));
        (n("gate"), n("up"), n("down"))
    };
    let mut y = moe::experts(x.clone(), &routed, expert, how);
    if c.moe.shared_expert_ffn.is_some() {
        let shared = |part: &str| w(&format!("shared_expert.{part}.weight"));
        let z: Tensor<3> = swiglu(x.unsqueeze(), shared("gate"), shared("up"), shared("down"));
        y = y + z.squeeze_dim(0);
    }
    let counts = moe::counts(&routed.choices, b, &positions, &batch.lengths, e);
    let counted = batch.counted() as f64;
    let over = moe::BalanceOver::of(c.moe.aux_normalization(), b, counted);
    let weights = moe::balance_weights(&counts, &batch.lengths, k, e, over);
    let lb = moe::load_balance(
        moe::balance_scores(routed.scores.clone(), c.moe.router()),
        &weights,
        b,
        &positions,
        &batch.lengths,
    );
    let keep: Vec<f64> = batch
        .targets
        .iter()
        .map(|&t| f64::from(u8::from(t != IGNORE)))
        .collect();
    let keep = Tensor::<1>::from_data(TensorData::new(keep, [b * s]), (&y.device(), y.dtype()));
    let z = moe::z_loss(routed.logits.clone(), keep, batch.counted() as f64);
    aux.load_balance = aux.load_balance.clone() + lb;
    aux.z = aux.z.clone() + z;
    aux.routing.push(Layer {
        selected,
        decided: Decided {
            choices: routed.choices,
            kept: routed.kept,
        },
    });
    y.reshape([b, s, h])
}

/// Layer `l`'s score-correction bias, when the model has one.
pub fn router_bias(c: &ModelConfig, p: &Params, l: u32) -> Option<Vec<f64>> {
    c.moe
        .expert_bias()
        .then(|| moe::values(&p.get(&format!("layers.{l}.mlp.router.expert_bias"))))
}
