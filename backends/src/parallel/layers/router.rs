//! The router's host-side decisions on a stage's ranks, made from forward values as a real
//! router's are: each rank's own top-k by its scores plus its copy of the score-correction
//! bias, the experts it dispatches to (the reference's routing when replayed), and which routed
//! slots the experts keep under a capacity factor.
//!
//! Capacity is per sequence (see `llama::moe`), so where SP or CP split a sequence the ranks
//! holding its parts all-gather every routed slot's weight
//! (`layers.N.mlp.router.capacity.all_gather`; the expert ids and positions travel with them as
//! host metadata, like the dispatch's split sizes) and each decides the whole sequence's drops,
//! keeping its own tokens' share.

use std::ops::Range;

use burn::tensor::Tensor;

use super::ctx::StageCtx;
use crate::llama::balance::{self, Pair};
use crate::llama::moe::{self, Choice, Dispatch};
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::tape::{Tape, Val};
use crate::parallel::topology::Layout;
use crate::positions::Positions;

/// Each rank's tokens: their positions within each row, and their span in the rank's local
/// sequence.
pub(super) type Tokens = [(Positions, Range<usize>)];

/// The slots each rank's experts keep (`None`: dropless).
pub(super) type Kept = Option<Vec<Vec<bool>>>;

impl StageCtx<'_> {
    /// Rank `i`'s copy of layer `l`'s score-correction bias, when the model has one.
    pub(super) fn bias(&self, i: usize, l: u32) -> Option<Vec<f64>> {
        self.model.moe.expert_bias().then(|| {
            let name = format!("layers.{l}.mlp.router.expert_bias");
            moe::values(&self.w(i, &name))
        })
    }

    /// The global index (row-major over the global batch) of each of group index `i`'s tokens
    /// in this microbatch's `rows` rows.
    fn global_tokens<'t>(
        &self,
        i: usize,
        rows: usize,
        positions: &'t Positions,
    ) -> impl Iterator<Item = usize> + 't {
        let seq = self.model.seq_len as usize;
        let first_row = self.first_rows[self.groups().replica_of(i)];
        (0..rows).flat_map(move |r| {
            positions
                .row(r)
                .iter()
                .map(move |&p| (first_row + r) * seq + p)
        })
    }

    /// Layer `l`'s routing on every rank, decided on the forward values as a real router's
    /// top-k is: what top-k selected by (scores plus the rank's copy of the bias), the rank's
    /// own top-k (what the routing level compares) and the experts it dispatches to (the
    /// reference's, when replayed).
    #[allow(clippy::type_complexity)]
    pub(super) fn decide(
        &self,
        tape: &Tape,
        l: u32,
        rows: usize,
        tokens: &Tokens,
        logits: &[Val],
    ) -> (Vec<Vec<f64>>, Vec<Vec<Choice>>, Vec<Vec<Choice>>) {
        let (e, k) = (
            self.model.experts.unwrap_or(1) as usize,
            self.model.top_k.unwrap_or(1) as usize,
        );
        let selected: Vec<Vec<f64>> = logits
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let v = tape.value(v);
                let [b, s, _] = v.dims();
                let scores = moe::scores(v.reshape([b * s, e]), self.model.moe.router());
                moe::selection(&moe::values(&scores), e, self.bias(i, l).as_deref())
            })
            .collect();
        let own: Vec<Vec<Choice>> = selected.iter().map(|s| moe::top_k(s, e, k)).collect();
        let choices = self.dispatch_choices(l, rows, tokens, &own);
        (selected, own, choices)
    }

    /// The experts each rank's tokens are dispatched to: the reference's when replayed (looked
    /// up by global row and position), else the rank's own top-k.
    fn dispatch_choices(
        &self,
        l: u32,
        rows: usize,
        tokens: &Tokens,
        own: &[Vec<Choice>],
    ) -> Vec<Vec<Choice>> {
        let Some(replay) = self.replay else {
            return own.to_vec();
        };
        let layer = &replay[l as usize];
        tokens
            .iter()
            .enumerate()
            .map(|(i, (positions, _))| {
                self.global_tokens(i, rows, positions)
                    .map(|tok| layer.choices[tok].clone())
                    .collect()
            })
            .collect()
    }

    /// The group indices holding parts of the same sequences: each replica's TP × CP ranks under
    /// SP, else each CP ring (the TP ranks hold copies).
    pub(super) fn sequence_groups(&self) -> Vec<Vec<usize>> {
        if self.topo.sp() {
            self.groups().replica_groups()
        } else {
            self.groups().cp_rings()
        }
    }

    /// Which slots each rank's experts keep under the model's capacity factor: the reference's
    /// decision when replayed, else every slot weight of the rank's sequences all-gathered and
    /// the whole sequences decided ([`balance::capacity`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn kept(
        &self,
        comm: &mut Comm,
        tape: &Tape,
        l: u32,
        (rows, tokens, lengths): (usize, &Tokens, &[&[usize]]),
        logits: &[Val],
        choices: &[Vec<Choice>],
        how: Dispatch,
    ) -> Vec<Kept> {
        let n = self.group.ranks.len();
        let Some(cap) = self.model.moe.capacity() else {
            return vec![None; n];
        };
        // The catalogued bug: every rank decides alone, on its own tokens, replay or not.
        let local = self.policies.layers.at(l).capacity_local;
        if local {
            comm.event(
                &format!("layers.{l}.mlp.router.capacity"),
                "decided on each rank's own tokens",
            );
        }
        let replayed = self.replay.and_then(|r| r[l as usize].kept.as_ref());
        if let Some(replayed) = replayed.filter(|_| !local) {
            return (0..n)
                .map(|i| {
                    let toks = self.global_tokens(i, rows, &tokens[i].0);
                    Some(toks.map(|t| replayed[t].clone()).collect())
                })
                .collect();
        }
        let (e, k) = (
            self.model.experts.unwrap_or(1) as usize,
            self.model.top_k.unwrap_or(1) as usize,
        );
        let weights: Vec<Tensor<2>> = (0..n)
            .map(|i| {
                let v = tape.value(logits[i]);
                let [b, s, _] = v.dims();
                let scores = moe::scores(v.reshape([b * s, e]), how.score);
                moe::slot_weights(scores, &choices[i], how.renormalize, None)
            })
            .collect();
        let groups = if local {
            (0..n).map(|i| vec![i]).collect()
        } else {
            self.sequence_groups()
        };
        let site = format!("layers.{l}.mlp.router.capacity.all_gather");
        let gathered = Layout::each(&groups, self.ranks(), weights, |r, p| {
            comm.all_gather(&site, r, p, 0)
        });
        let mut out = vec![None; n];
        for group in &groups {
            for &i in group {
                let received = moe::values(&gathered[i]);
                let (pairs, own) = group_pairs((group, i), tokens, choices, &received, k);
                let kept = balance::capacity(&pairs, lengths[i], (e, k), cap);
                out[i] = Some(kept[own].chunks(k).map(<[bool]>::to_vec).collect());
            }
        }
        out
    }
}

/// The whole sequences' (token, slot) pairs of `group` in group order (top-`k`), weighted by
/// what rank `i` received, and where rank `i`'s own lie among them.
fn group_pairs(
    (group, i): (&[usize], usize),
    tokens: &Tokens,
    choices: &[Vec<Choice>],
    received: &[f64],
    k: usize,
) -> (Vec<Pair>, Range<usize>) {
    let (mut pairs, mut own, mut at) = (Vec::new(), 0..0, 0);
    for &m in group {
        let positions = &tokens[m].0;
        let per_row = positions.len();
        for (t, c) in choices[m].iter().enumerate() {
            pairs.extend(c.iter().enumerate().map(|(j, &expert)| Pair {
                row: t / per_row,
                position: positions.at(t),
                slot: j,
                expert,
                weight: received[at + t * k + j],
            }));
        }
        let len = choices[m].len() * k;
        if m == i {
            own = at..at + len;
        }
        at += len;
    }
    (pairs, own)
}
