//! The `moe` family's MLP on a stage's ranks.
//!
//! Each rank routes the tokens it holds — all of them on every TP rank without SP (the TP ranks
//! compute copies), its sequence shard under SP, its chunks under CP — and runs the experts on
//! them (`llama::moe`), or, under expert parallelism, sends them to the ranks holding their
//! experts and gets the outputs back (`dispatch.rs`). The load-balance loss needs each sequence's expert counts over all its
//! tokens, so where SP or CP split a sequence the counts are all-reduced across the ranks holding
//! its parts (`layers.N.mlp.router.counts.all_reduce`); the loss is linear in the scores given
//! those counts, so each rank adds its own tokens' share and the gradients need nothing more.
//! Router and expert weights are replicated: under SP their gradients are partial per TP rank
//! and are all-reduced across TP with the norm weights (`step.rs`).

use burn::tensor::{Tensor, TensorData};

use super::ctx::{LayerFaults, StageCtx};
use super::faulty;
use super::router::Tokens;
use crate::data::IGNORE;
use crate::llama::balance;
use crate::llama::layers::{linear, swiglu};
use crate::llama::moe::{self, BalanceOver, Choice, Decided, Dispatch, Routed};
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::tape::{Tape, Val};
use crate::parallel::context::Local;
use crate::parallel::topology::Layout;
use crate::positions::Positions;

/// One rank's routing of its tokens in one layer, as the routing level reads it.
#[derive(Clone, Debug)]
pub struct RouteRecord {
    pub layer: u32,
    /// Global row of the microbatch's first row of this rank's replica.
    pub first_row: usize,
    /// Rows of the microbatch (global row = the microbatch's first row + this).
    pub rows: usize,
    /// Positions (within each row) of the rank's tokens.
    pub positions: Positions,
    /// Scores [rows · positions, E], row-major.
    pub scores: Vec<f64>,
    pub choices: Vec<Choice>,
}

/// What the MoE layers of a stage add to its microbatch's record.
#[derive(Default)]
pub struct MoeOut {
    /// Auxiliary loss terms per rank and layer, seeded with one in backward like the loss.
    pub aux: Vec<Val>,
    /// The load-balance loss of this microbatch's sequences over this stage's layers, each
    /// token's share counted once.
    pub load_balance: f64,
    /// Routing of the ranks holding distinct tokens.
    pub routing: Vec<RouteRecord>,
    /// With a score-correction bias: each rank's (global rank, layer, tokens routed to each
    /// expert), for the bias update after the step.
    pub load: Vec<(usize, u32, Vec<f64>)>,
}

impl StageCtx<'_> {
    /// Whether group index `i` holds tokens no other rank of its cp group holds (without SP,
    /// the TP ranks hold copies and the first one speaks for them).
    fn distinct(&self, i: usize) -> bool {
        self.topo.sp() || i.is_multiple_of(self.groups().tp)
    }

    /// Positions (within each row) of the tokens group index `i` holds, and the row-major
    /// index of each of its tokens in its cp rank's local sequence.
    fn token_positions(&self, locals: &[Local], i: usize) -> (Positions, std::ops::Range<usize>) {
        let g = self.groups();
        let local = &locals[g.local_of(i)].positions;
        if !self.topo.sp() {
            return (local.clone(), 0..local.len());
        }
        let n = local.len() / g.tp;
        let t = i % g.tp;
        (local.narrow(t * n..(t + 1) * n), t * n..(t + 1) * n)
    }

    /// Layer `l`'s mixture of experts on every rank's tokens: the output per rank, its auxiliary
    /// losses and routing added to `out`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn moe_mlp(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        locals: &[Local],
        l: u32,
        hn: &[Val],
        normalizers: &[f64],
        out: &mut MoeOut,
        f: LayerFaults,
    ) -> Vec<Val> {
        let g = self.groups();
        let e = self.model.experts.unwrap_or(1) as usize;
        let k = self.model.top_k.unwrap_or(1) as usize;
        let name = |s: &str| format!("layers.{l}.mlp.{s}");
        let flat = |t: Tensor<3>| {
            let [b, s, d] = t.dims();
            t.reshape([b * s, d])
        };
        let logits = tape.per_rank(self.ranks(), &[hn], |i, v| {
            linear(v[0].clone(), self.w(i, &name("router.weight")))
        });
        let rows = locals[0].batch.batch;
        let lengths: Vec<&[usize]> = (0..self.group.ranks.len())
            .map(|i| locals[g.local_of(i)].batch.lengths.as_slice())
            .collect();
        let tokens: Vec<(Positions, std::ops::Range<usize>)> = (0..self.group.ranks.len())
            .map(|i| self.token_positions(locals, i))
            .collect();
        let score = self.model.moe.router();
        let (selected, own, choices) = self.decide(tape, l, rows, &tokens, &logits);
        let counts = self.sequence_counts(comm, l, rows, &tokens, &choices, &lengths);
        if self.model.moe.expert_bias() {
            for (i, c) in choices.iter().enumerate() {
                let load = balance::load(c, rows, &tokens[i].0, lengths[i], e);
                out.load.push((self.group.ranks[i], l, load));
            }
        }
        let unnormalized = self.policies.layers.at(l).router_unnormalized;
        let how = Dispatch {
            mlp: if f.swiglu_wrong_operand {
                faulty::swiglu_wrong_operand
            } else {
                swiglu
            },
            score,
            renormalize: moe::renormalizes(score, k) && !unnormalized,
        };
        let shape = (rows, tokens.as_slice(), lengths.as_slice());
        let kept = self.kept(comm, tape, l, shape, &logits, &choices, how);
        let decided: Vec<Decided> = choices
            .into_iter()
            .zip(kept)
            .map(|(choices, kept)| Decided { choices, kept })
            .collect();
        let y = if self.topo.experts().parallel() {
            let wrong = self.policies.layers.at(l).ep_combine_permuted;
            if wrong {
                comm.event(&name("experts.combine"), "rows returned one place off");
            }
            self.expert_parallel(tape, comm, l, hn, &logits, &decided, how, wrong)
        } else {
            self.replicated_experts(tape, hn, &logits, &decided, l, how)
        };
        if unnormalized {
            comm.event(&name("router"), "top-k scores not renormalized");
        }
        let shape = (rows, tokens.as_slice(), normalizers);
        let weights = self.balance_weights(comm, l, shape, &counts, &lengths);
        let lb = tape.per_rank(self.ranks(), &[&logits], |i, v| {
            let scores = moe::balance_scores(moe::scores(flat(v[0].clone()), score), score);
            moe::load_balance(scores, &weights[i], rows, &tokens[i].0, lengths[i])
                .reshape([1, 1, 1])
        });
        let z = self.z_losses(tape, locals, &tokens, &logits, normalizers);
        for i in (0..self.group.ranks.len()).filter(|&i| self.distinct(i)) {
            out.load_balance += moe::values(&tape.value(lb[i]))[0];
            out.routing.push(RouteRecord {
                layer: l,
                first_row: self.first_rows[g.replica_of(i)],
                rows,
                positions: tokens[i].0.clone(),
                scores: selected[i].clone(),
                choices: own[i].clone(),
            });
        }
        out.aux.extend(lb.into_iter().chain(z));
        y
    }
}

impl StageCtx<'_> {
    /// Each rank's router z-loss over the tokens its cross-entropy counts.
    fn z_losses(
        &self,
        tape: &mut Tape,
        locals: &[Local],
        tokens: &Tokens,
        logits: &[Val],
        normalizers: &[f64],
    ) -> Vec<Val> {
        let g = self.groups();
        let rows = locals[0].batch.batch;
        tape.per_rank(self.ranks(), &[logits], |i, v| {
            let local = &locals[g.local_of(i)].batch;
            let span = &tokens[i].1;
            let keep: Vec<f64> = (0..rows)
                .flat_map(|r| span.clone().map(move |p| (r, p)))
                .map(|(r, p)| f64::from(u8::from(local.targets[r * local.seq_len + p] != IGNORE)))
                .collect();
            let keep = self.constant(keep, [rows * span.len()]);
            let [b, s, e] = v[0].dims();
            let logits = v[0].clone().reshape([b * s, e]);
            moe::z_loss(logits, keep, normalizers[g.local_of(i)]).reshape([1, 1, 1])
        })
    }

    /// Every rank runs every expert on its own tokens (expert parallelism 1).
    fn replicated_experts(
        &self,
        tape: &mut Tape,
        hn: &[Val],
        logits: &[Val],
        decided: &[Decided],
        l: u32,
        how: Dispatch,
    ) -> Vec<Val> {
        tape.per_rank(self.ranks(), &[hn, logits], |i, v| {
            let [b, s, h] = v[0].dims();
            let flat = |t: Tensor<3>, d: usize| t.reshape([b * s, d]);
            let e = v[1].dims()[2];
            let routed = Routed {
                scores: moe::scores(flat(v[1].clone(), e), how.score),
                logits: flat(v[1].clone(), e),
                choices: decided[i].choices.clone(),
                kept: decided[i].kept.clone(),
            };
            let expert = |x: usize| {
                let n =
                    |part: &str| self.w(i, &format!("layers.{l}.mlp.experts.{x}.{part}.weight"));
                (n("gate"), n("up"), n("down"))
            };
            moe::experts(flat(v[0].clone(), h), &routed, expert, how).reshape([b, s, h])
        })
    }

    /// Each rank's sequences' load-balance weights per expert ([`moe::balance_weights`]),
    /// traced at `layers.N.mlp.router.load_balance`: what the loss's scale is, before any
    /// score enters it.
    fn balance_weights(
        &self,
        comm: &mut Comm,
        l: u32,
        (rows, tokens, normalizers): (usize, &Tokens, &[f64]),
        counts: &[Vec<f64>],
        lengths: &[&[usize]],
    ) -> Vec<Vec<f64>> {
        let e = self.model.experts.unwrap_or(1) as usize;
        let k = self.model.top_k.unwrap_or(1) as usize;
        let site = format!("layers.{l}.mlp.router.load_balance");
        let over_dp = self.policies.layers.at(l).aux_loss_over_dp;
        if over_dp {
            comm.event(&site, "divided by dp × the global batch's count");
        }
        let g = self.groups();
        let mut weights: Vec<Vec<f64>> = (0..self.group.ranks.len())
            .map(|i| {
                let norm = self.model.moe.aux_normalization();
                let over = BalanceOver::of(norm, self.sequences, normalizers[g.local_of(i)]);
                let over = if over_dp {
                    over.times(self.topo.dp())
                } else {
                    over
                };
                moe::balance_weights(&counts[i], lengths[i], k, e, over)
            })
            .collect();
        if let Some(wrong) = self.policies.layers.at(l).aux_token_count {
            comm.event(&site, wrong.describe());
            for (i, w) in weights.iter_mut().enumerate() {
                faulty::misread_token_count(w, e, &tokens[i].0, lengths[i], wrong);
            }
        }
        let shown: Vec<Tensor<2>> = (0..self.group.ranks.len())
            .filter(|&i| self.distinct(i))
            .map(|i| self.constant(weights[i].clone(), [rows, e]))
            .collect();
        comm.trace_each(&site, &shown);
        weights
    }

    /// Each rank's sequences' expert counts over all their tokens: local counts all-reduced
    /// across the ranks holding parts of the same sequences (the CP ring, and the TP group under
    /// SP), traced at `layers.N.mlp.router.counts`.
    fn sequence_counts(
        &self,
        comm: &mut Comm,
        l: u32,
        rows: usize,
        tokens: &Tokens,
        choices: &[Vec<Choice>],
        lengths: &[&[usize]],
    ) -> Vec<Vec<f64>> {
        let e = self.model.experts.unwrap_or(1) as usize;
        let counts: Vec<Tensor<1>> = (0..self.group.ranks.len())
            .map(|i| {
                let c = moe::counts(&choices[i], rows, &tokens[i].0, lengths[i], e);
                let dtype = crate::host::count_dtype(self.device);
                Tensor::<1>::from_data(TensorData::new(c, [rows * e]), (self.device, dtype))
            })
            .collect();
        let seq_groups = self.sequence_groups();
        let site = format!("layers.{l}.mlp.router.counts");
        let counts = Layout::each(&seq_groups, self.ranks(), counts, |r, p| {
            comm.all_reduce_sum(&format!("{site}.all_reduce"), r, p)
        });
        let shown: Vec<Tensor<2>> = (0..self.group.ranks.len())
            .filter(|&i| self.distinct(i))
            .map(|i| counts[i].clone().reshape([rows, e]))
            .collect();
        comm.trace_each(&site, &shown);
        counts.iter().map(moe::values).collect()
    }
}
