//! The `moe` family's MLP: a top-k routed mixture of SwiGLU experts (Mixtral / DeepSeek style),
//! as functions of tensors, shared by the oracle and every rank of a mesh.
//!
//! - **Router**: scores = softmax(x · W_router) over the experts, or an independent sigmoid per
//!   expert (DeepSeek-V3); each token goes to its top-k experts by score plus the optional
//!   score-correction bias (ties to the lower id), weighted by its top-k scores (without the
//!   bias) renormalized to sum to one (sigmoid with k = 1: the raw score, as Megatron).
//! - **Experts**: each expert runs on the tokens routed to it (`select`), and its weighted
//!   outputs are added back at their tokens (`select_assign`). Dropless by default; with a
//!   capacity factor an expert keeps at most ⌈factor·k·T/E⌉ of each sequence's T real tokens
//!   (`balance.rs`), the others get weight zero (Megatron drops after renormalizing, so the
//!   kept weights are not renormalized again).
//! - **Shared expert** (optional): a SwiGLU MLP every token goes through, added to the routed
//!   output.
//! - **Auxiliary losses**: the sequence-wise load-balance loss (DeepSeek-V2; Megatron's
//!   `seq_aux_loss`) α·Σ_e f_e·P_e per sequence, averaged over the global batch's sequences
//!   (or, with `aux_loss_normalization = "token"`, each sequence's term times its real tokens
//!   over the global batch's counted tokens: the per-token loss form), with
//!   f_e = E/(k·T)·(tokens of the sequence routed to e) — a count, no gradient — and
//!   P_e = mean score of e over the sequence's T real tokens (sigmoid scores normalized over the
//!   experts first, as Megatron); and the router z-loss β·mean(logsumexp(router logits)²) over
//!   the tokens the cross-entropy counts.
//! - **Score-correction bias** (optional): after every step each layer's bias moves by
//!   1e-3 towards balance, b_e += rate·sign(mean load − load_e), the loads counted over the
//!   whole global batch (`balance.rs`).
//!
//! The load balance and the capacity are per sequence, not per microbatch or per rank, so they
//! are the same on every mesh: a sequence is never split by DP, PP or microbatches, and where SP
//! or CP split it the per-sequence counts are all-reduced (and the capacity's candidates
//! all-gathered) across the ranks that hold its parts. (Megatron computes capacity per rank's
//! tokens, which makes the dropped set depend on the layout; a parity check needs a definition
//! that does not.)

use crate::positions::Positions;
use burn::tensor::activation::{log_softmax, sigmoid, softmax};
use burn::tensor::{IndexingUpdateOp, Int, Tensor, TensorData};
pub use meshparity_engine::replay::Decided;
use meshparity_specs::{AuxNormalization, RouterScore};

use super::layers::swiglu;

/// Load-balance loss coefficient α.
pub const LB_COEFF: f64 = 1e-2;
/// Router z-loss coefficient β.
pub const Z_COEFF: f64 = 1e-3;

/// A token's experts, best first.
pub type Choice = Vec<usize>;

/// What routing decided for a block of tokens.
pub struct Routed {
    /// Router scores (softmax or sigmoid), [T, E].
    pub scores: Tensor<2>,
    /// Router logits, [T, E] (for the z-loss).
    pub logits: Tensor<2>,
    /// Each token's top-k experts.
    pub choices: Vec<Choice>,
    /// Which of each token's slots its expert kept (`None`: dropless, all of them).
    pub kept: Option<Vec<Vec<bool>>>,
}

/// A layer's router settings.
#[derive(Clone, Copy, Debug)]
pub struct Router<'a> {
    pub score: RouterScore,
    pub k: usize,
    /// The layer's score-correction bias (selection only), one per expert.
    pub bias: Option<&'a [f64]>,
}

/// Router logits → scores.
pub fn scores(logits: Tensor<2>, f: RouterScore) -> Tensor<2> {
    match f {
        RouterScore::Softmax => softmax(logits, 1),
        RouterScore::Sigmoid => sigmoid(logits),
    }
}

/// Scores as the load-balance loss reads them: a distribution over the experts (sigmoid
/// scores normalized, as Megatron's `scores_for_aux_loss`).
pub fn balance_scores(scores: Tensor<2>, f: RouterScore) -> Tensor<2> {
    match f {
        RouterScore::Softmax => scores,
        RouterScore::Sigmoid => scores.clone() / (scores.sum_dim(1) + 1e-20),
    }
}

/// What top-k selects by, per token row ([T, E] row-major): the scores plus the bias.
pub fn selection(scores: &[f64], experts: usize, bias: Option<&[f64]>) -> Vec<f64> {
    match bias {
        None => scores.to_vec(),
        Some(b) => scores
            .chunks(experts)
            .flat_map(|row| row.iter().zip(b).map(|(s, b)| s + b))
            .collect(),
    }
}

/// Whether top-k scores are renormalized: always for softmax, for sigmoid when k > 1.
pub fn renormalizes(f: RouterScore, k: usize) -> bool {
    f == RouterScore::Softmax || k > 1
}

/// The router's scores and each token's top-k experts (or `replay`'s, when given); the host
/// selection values (scores plus bias) come back beside.
///
/// # Shapes
/// x: [T, H], router: [H, E]
pub fn route(
    x: Tensor<2>,
    router: Tensor<2>,
    r: Router<'_>,
    replay: Option<&[Choice]>,
) -> (Routed, Vec<f64>) {
    let logits = x.matmul(router);
    let scores = scores(logits.clone(), r.score);
    let e = scores.dims()[1];
    let selected = selection(&values(&scores), e, r.bias);
    let choices = match replay {
        Some(c) => c.to_vec(),
        None => top_k(&selected, e, r.k),
    };
    let routed = Routed {
        scores,
        logits,
        choices,
        kept: None,
    };
    (routed, selected)
}

/// Host values of a tensor, in f64.
pub fn values<const D: usize>(t: &Tensor<D>) -> Vec<f64> {
    t.clone()
        .inner()
        .into_data()
        .convert::<f64>()
        .try_to_vec::<f64>()
        .expect("float tensors convert to f64")
}

/// The `k` best of each row of `scores` ([T, E] row-major), best first, ties to the lower id.
pub fn top_k(scores: &[f64], experts: usize, k: usize) -> Vec<Choice> {
    scores
        .chunks(experts)
        .map(|row| {
            let mut ids: Vec<usize> = (0..experts).collect();
            ids.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            ids.truncate(k);
            ids
        })
        .collect()
}

/// An expert's MLP: (x, gate, up, down) → output ([`swiglu`], or a faulty one).
pub type Mlp = fn(Tensor<3>, Tensor<2>, Tensor<2>, Tensor<2>) -> Tensor<3>;

/// How the experts run: which MLP, the router's score function, and whether top-k scores are
/// renormalized.
#[derive(Clone, Copy)]
pub struct Dispatch {
    pub mlp: Mlp,
    pub score: RouterScore,
    pub renormalize: bool,
}

impl Dispatch {
    /// The model's dispatch: SwiGLU experts, scores renormalized as [`renormalizes`] says.
    pub fn of(score: RouterScore, k: usize) -> Self {
        Self {
            mlp: swiglu,
            score,
            renormalize: renormalizes(score, k),
        }
    }
}

/// The experts' combined output: each expert on its tokens, weighted by the renormalized
/// top-k scores. `expert(e)` gives expert e's (gate, up, down).
///
/// # Shapes
/// x: [T, H] → [T, H]
pub fn experts(
    x: Tensor<2>,
    routed: &Routed,
    expert: impl Fn(usize) -> (Tensor<2>, Tensor<2>, Tensor<2>),
    how: Dispatch,
) -> Tensor<2> {
    let e = routed.scores.dims()[1];
    let k = routed.choices.first().map_or(0, Vec::len);
    let device = x.device();
    let weights = slot_weights(
        routed.scores.clone(),
        &routed.choices,
        how.renormalize,
        routed.kept.as_deref(),
    );
    let mut out = x.zeros_like();
    for ex in 0..e {
        // (token, slot) pairs routed to this expert, in token order.
        let (rows, slots): (Vec<i64>, Vec<i64>) = routed
            .choices
            .iter()
            .enumerate()
            .flat_map(|(tok, c)| {
                c.iter()
                    .enumerate()
                    .filter(move |(_, &id)| id == ex)
                    .map(move |(j, _)| (tok as i64, (tok * k + j) as i64))
            })
            .unzip();
        if rows.is_empty() {
            continue;
        }
        let n = rows.len();
        let rows = Tensor::<1, Int>::from_data(TensorData::new(rows, [n]), &device);
        let slots = Tensor::<1, Int>::from_data(TensorData::new(slots, [n]), &device);
        let (gate, up, down) = expert(ex);
        let h = x.clone().select(0, rows.clone()).unsqueeze::<3>();
        let y: Tensor<2> = (how.mlp)(h, gate, up, down).squeeze_dim(0);
        let w = weights.clone().select(0, slots);
        out = out.select_assign(0, rows, y * w, IndexingUpdateOp::Add);
    }
    out
}

/// Each (token, slot)'s weight, [T·k, 1] in token-major order: the token's top-k scores,
/// renormalized to sum to one (or as they are, when `renormalize` is off), zero where `kept`
/// says the expert dropped the slot.
///
/// # Shapes
/// scores: [T, E] → [T·k, 1]
pub fn slot_weights(
    scores: Tensor<2>,
    choices: &[Choice],
    renormalize: bool,
    kept: Option<&[Vec<bool>]>,
) -> Tensor<2> {
    let t = scores.dims()[0];
    let k = choices.first().map_or(0, Vec::len);
    let idx: Vec<i64> = choices.iter().flatten().map(|&i| i as i64).collect();
    let idx = Tensor::<2, Int>::from_data(TensorData::new(idx, [t, k]), &scores.device());
    let picked = scores.clone().gather(1, idx);
    let weights = if renormalize {
        picked.clone() / picked.sum_dim(1)
    } else {
        picked
    };
    let weights = weights.reshape([t * k, 1]);
    match kept {
        None => weights,
        Some(kept) => {
            let mask: Vec<f64> = kept
                .iter()
                .flatten()
                .map(|&x| f64::from(u8::from(x)))
                .collect();
            let mask = Tensor::<2>::from_data(
                TensorData::new(mask, [t * k, 1]),
                (&scores.device(), scores.dtype()),
            );
            weights * mask
        }
    }
}

/// Per-sequence expert counts: how many of each sequence's real tokens (position < length)
/// chose each expert. `positions.at(i)` is token i's position in its row; tokens are
/// row-major over `rows` rows.
pub fn counts(
    choices: &[Choice],
    rows: usize,
    positions: &Positions,
    lengths: &[usize],
    experts: usize,
) -> Vec<f64> {
    let per_row = choices.len() / rows;
    let mut c = vec![0.0; rows * experts];
    for (tok, choice) in choices.iter().enumerate() {
        let row = tok / per_row;
        if positions.at(tok) < lengths[row] {
            for &e in choice {
                c[row * experts + e] += 1.0;
            }
        }
    }
    c
}

/// What the load-balance loss's terms are divided by (`aux_loss_normalization`): per sequence,
/// T_s · B (each sequence's mean score, averaged over the global batch's B sequences); per token,
/// N, the global batch's counted tokens (the cross-entropy's normalizer), so each real token's
/// share weighs what one of the loss's tokens does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BalanceOver {
    Sequences(usize),
    Tokens(f64),
}

impl BalanceOver {
    pub fn of(normalization: AuxNormalization, sequences: usize, counted: f64) -> BalanceOver {
        match normalization {
            AuxNormalization::Sequence => BalanceOver::Sequences(sequences),
            AuxNormalization::Token => BalanceOver::Tokens(counted),
        }
    }

    /// The same form over `k` copies of the global batch (a count taken again over k groups).
    pub fn times(self, k: usize) -> BalanceOver {
        match self {
            BalanceOver::Sequences(b) => BalanceOver::Sequences(b * k),
            BalanceOver::Tokens(n) => BalanceOver::Tokens(n * k as f64),
        }
    }
}

/// Each sequence's load-balance weight per expert, α · f_{s,e} / (T_s · B) per sequence or
/// α · f_{s,e} / N per token ([`BalanceOver`]), with f_{s,e} = E/(k·T_s) · count_{s,e}: what
/// one real token's score for e adds to the loss. `counts` are the sequences' (global) expert counts, [rows, E].
pub fn balance_weights(
    counts: &[f64],
    lengths: &[usize],
    k: usize,
    experts: usize,
    over: BalanceOver,
) -> Vec<f64> {
    let mut w = vec![0.0; counts.len()];
    for (row, &len) in lengths.iter().enumerate() {
        let real = len as f64;
        let per_token = match over {
            BalanceOver::Sequences(b) => real * b as f64,
            BalanceOver::Tokens(n) => n,
        };
        for ex in 0..experts {
            let f = experts as f64 / (k as f64 * real) * counts[row * experts + ex];
            w[row * experts + ex] = LB_COEFF * f / per_token;
        }
    }
    w
}

/// The load-balance loss of these tokens given their sequences' weights
/// ([`balance_weights`]): Σ over real tokens t and experts e of w_{s(t),e} · p_{t,e}. Linear in
/// the scores, so ranks holding parts of a sequence each add their tokens' share.
///
/// # Shapes
/// scores: [T, E] → [1]
pub fn load_balance(
    scores: Tensor<2>,
    weights: &[f64],
    rows: usize,
    positions: &Positions,
    lengths: &[usize],
) -> Tensor<1> {
    let [t, e] = scores.dims();
    let per_row = t / rows;
    let mut coeff = vec![0.0; t * e];
    for tok in 0..t {
        let row = tok / per_row;
        if positions.at(tok) >= lengths[row] {
            continue;
        }
        coeff[tok * e..(tok + 1) * e].copy_from_slice(&weights[row * e..(row + 1) * e]);
    }
    let coeff = Tensor::<2>::from_data(
        TensorData::new(coeff, [t, e]),
        (&scores.device(), scores.dtype()),
    );
    (scores * coeff).sum()
}

/// The z-loss of these tokens: β/N · Σ over counted tokens of logsumexp(logits)².
///
/// # Shapes
/// logits: [T, E], keep: [T] (1 where the token counts) → [1]
pub fn z_loss(logits: Tensor<2>, keep: Tensor<1>, normalizer: f64) -> Tensor<1> {
    let t = logits.dims()[0];
    // logsumexp = x_j − log_softmax_j for any j; take j = 0.
    let lse = logits.clone().narrow(1, 0, 1) - log_softmax(logits, 1).narrow(1, 0, 1);
    (lse.reshape([t]).powi_scalar(2) * keep).sum() * (Z_COEFF / normalizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_best_first_with_ties_to_the_lower_id() {
        let scores = [0.1, 0.4, 0.4, 0.1, 0.7, 0.1, 0.1, 0.1];
        assert_eq!(top_k(&scores, 4, 2), vec![vec![1, 2], vec![0, 1]]);
    }

    #[test]
    fn selection_adds_the_bias_per_expert() {
        let s = selection(&[0.1, 0.2, 0.3, 0.4], 2, Some(&[1.0, 0.0]));
        assert_eq!(top_k(&s, 2, 1), vec![vec![0], vec![0]]);
        assert_eq!(top_k(&selection(&[0.1, 0.2], 2, None), 2, 1), vec![vec![1]]);
    }

    /// Per sequence a short sequence's tokens weigh more (its mean counts as much as a long
    /// one's); per token every token weighs 1/N.
    #[test]
    fn token_form_weighs_every_token_alike() {
        // Two sequences of 4 and 2 real tokens, one expert, k = 1: f = 1 for both.
        let counts = [4.0, 2.0];
        let seq = balance_weights(&counts, &[4, 2], 1, 1, BalanceOver::Sequences(2));
        let tok = balance_weights(&counts, &[4, 2], 1, 1, BalanceOver::Tokens(5.0));
        assert_eq!(seq, vec![LB_COEFF / 8.0, LB_COEFF / 4.0]);
        assert_eq!(tok, vec![LB_COEFF / 5.0, LB_COEFF / 5.0]);
        let twice = balance_weights(&counts, &[4, 2], 1, 1, BalanceOver::Tokens(5.0).times(2));
        assert_eq!(twice, vec![LB_COEFF / 10.0, LB_COEFF / 10.0]);
    }

    #[test]
    fn counts_skip_padding() {
        let choices = vec![vec![0, 1], vec![1, 2], vec![2, 3], vec![0, 3]];
        // Two rows of two tokens; row 1 has length 1.
        let c = counts(&choices, 2, &Positions::shared(vec![0, 1]), &[2, 1], 4);
        assert_eq!(c, vec![1.0, 2.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
    }
}
