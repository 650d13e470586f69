//! Expert parallelism: tokens travel to the ranks holding their experts and back, as Megatron's
//! all-to-all token dispatcher (`MoEAlltoAllTokenDispatcher`) moves them.
//!
//! 1. **permute**: each rank's (token, slot) rows sorted by expert, hence by destination;
//! 2. **dispatch**: all-to-all over the EP group (`layers.N.mlp.experts.dispatch`);
//! 3. with ETP: all-gather of the received rows over the ETP group, unequal blocks
//!    (`layers.N.mlp.experts.in`);
//! 4. each local expert on its rows with the rank's ETP shard of its MLP (gate/up columns,
//!    down rows: partial sums under ETP);
//! 5. with ETP: reduce-scatter of the partial outputs back to the rank that received each row
//!    (`layers.N.mlp.experts.out`);
//! 6. **combine**: the reverse all-to-all (`layers.N.mlp.experts.combine`);
//! 7. **unpermute**: each row weighted by its token's top-k score and added at its token.
//!
//! Every rank holds distinct tokens here (Megatron requires SP for MoE with TP and EP), so no
//! token is dispatched twice. Backward runs the same moves transposed (`route.rs`).

use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor, TensorData};

use super::ctx::StageCtx;
use crate::llama::moe::{self, Choice, Decided, Dispatch};
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::route::{Exchange, Piece, Route};
use crate::parallel::comm::tape::{Tape, Val};
use crate::parallel::topology::Experts;

/// One row a rank sends: its token, its (token, slot) index and its expert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Row {
    token: usize,
    slot: usize,
    expert: usize,
}

/// Where every row goes, worked out on the host from the routing (as Megatron's dispatcher
/// computes its split sizes before the all-to-all).
#[derive(Debug)]
struct Plan {
    /// Per rank: the rows it sends, in send order.
    sent: Vec<Vec<Row>>,
    /// Per rank: the expert of each row it computes (after the ETP gather), in row order.
    computed: Vec<Vec<usize>>,
    dispatch: Route,
    /// ETP all-gather and reduce-scatter (absent without ETP).
    etp: Option<(Route, Route)>,
    combine: Route,
}

impl Plan {
    /// The plan for `choices` (per stage rank, its tokens' experts) over `experts` experts.
    /// `wrong_combine` returns each rank's rows one place off (the catalogued bug).
    fn new(choices: &[Vec<Choice>], experts: usize, x: Experts, wrong_combine: bool) -> Self {
        let n = choices.len();
        let per = experts / x.ep;
        let sent: Vec<Vec<Row>> = choices.iter().map(|c| sent_rows(c)).collect();
        // Rows of rank i bound for ep index e: contiguous, experts being sorted.
        let bound = |i: usize, e: usize| {
            let start = sent[i].partition_point(|r| r.expert / per < e);
            let end = sent[i].partition_point(|r| r.expert / per <= e);
            start..end
        };
        let mut dispatch = Route {
            pieces: vec![Vec::new(); n],
            lens: vec![0; n],
        };
        let mut combine = Route {
            pieces: vec![Vec::new(); n],
            lens: sent.iter().map(Vec::len).collect(),
        };
        let mut received: Vec<Vec<usize>> = vec![Vec::new(); n];
        for group in x.ep_groups(n) {
            for &j in &group {
                let e = x.ep_of(j);
                for &p in &group {
                    let rows = bound(p, e);
                    let at = dispatch.lens[j];
                    received[j].extend(sent[p][rows.clone()].iter().map(|r| r.expert));
                    combine.pieces[p].push(Piece {
                        src: j,
                        rows: at..at + rows.len(),
                        at: rows.start,
                    });
                    dispatch.lens[j] += rows.len();
                    dispatch.pieces[j].push(Piece { src: p, rows, at });
                }
            }
        }
        if wrong_combine {
            combine = rotated(&combine);
        }
        let (computed, etp) = if x.etp == 1 {
            (received, None)
        } else {
            let (computed, gather, scatter) = etp_routes(x, &dispatch.lens, &received);
            (computed, Some((gather, scatter)))
        };
        Plan {
            sent,
            computed,
            dispatch,
            etp,
            combine,
        }
    }
}

/// One rank's routed rows (each token's k choices), sorted by expert and token: the order an
/// all-to-all sends them in.
fn sent_rows(choices: &[Choice]) -> Vec<Row> {
    let k = choices.first().map_or(0, Vec::len);
    let mut rows: Vec<Row> = choices
        .iter()
        .enumerate()
        .flat_map(|(token, ids)| {
            ids.iter().enumerate().map(move |(j, &expert)| Row {
                token,
                slot: token * k + j,
                expert,
            })
        })
        .collect();
    rows.sort_by_key(|r| (r.expert, r.token));
    rows
}

/// Under expert tensor parallelism: the experts each rank computes (its ETP group's received
/// rows, all of them), the all-gather over the group and the scatter back.
fn etp_routes(
    x: Experts,
    lens: &[usize],
    received: &[Vec<usize>],
) -> (Vec<Vec<usize>>, Route, Route) {
    let n = lens.len();
    let mut gather = Route {
        pieces: vec![Vec::new(); n],
        lens: vec![0; n],
    };
    let mut scatter = Route {
        pieces: vec![Vec::new(); n],
        lens: lens.to_vec(),
    };
    let mut computed = vec![Vec::new(); n];
    for group in x.etp_groups(n) {
        let mut at = 0;
        for &a in &group {
            for &j in &group {
                gather.pieces[j].push(Piece {
                    src: a,
                    rows: 0..lens[a],
                    at,
                });
                computed[j].extend(received[a].iter().copied());
                scatter.pieces[a].push(Piece {
                    src: j,
                    rows: at..at + lens[a],
                    at: 0,
                });
            }
            at += lens[a];
        }
        for &j in &group {
            gather.lens[j] = at;
        }
    }
    (computed, gather, scatter)
}

/// `v` as an index tensor on `device`.
fn ints(v: Vec<i64>, device: &Device) -> Tensor<1, Int> {
    let len = v.len();
    Tensor::<1, Int>::from_data(TensorData::new(v, [len]), device)
}

/// `route` with every output's rows one place off (row r gets row r + 1's), one row at a time.
fn rotated(route: &Route) -> Route {
    let pieces = route
        .pieces
        .iter()
        .zip(&route.lens)
        .map(|(pieces, &len)| {
            let mut rows = vec![(0, 0); len];
            for p in pieces {
                for (k, r) in p.rows.clone().enumerate() {
                    rows[p.at + k] = (p.src, r);
                }
            }
            rows.rotate_left(1.min(len));
            rows.into_iter()
                .enumerate()
                .map(|(at, (src, r))| Piece {
                    src,
                    rows: r..r + 1,
                    at,
                })
                .collect()
        })
        .collect();
    Route {
        pieces,
        lens: route.lens.clone(),
    }
}

impl StageCtx<'_> {
    /// Layer `l`'s experts on every rank's tokens under expert parallelism: `hn` the tokens,
    /// `logits` the router's, `decided` the experts they are dispatched to (and the slots kept). The output per rank,
    /// shaped like `hn`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn expert_parallel(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        l: u32,
        hn: &[Val],
        logits: &[Val],
        decided: &[Decided],
        how: Dispatch,
        wrong_combine: bool,
    ) -> Vec<Val> {
        let e = self.model.experts.unwrap_or(1) as usize;
        let x = self.topo.experts();
        let choices: Vec<Vec<Choice>> = decided.iter().map(|d| d.choices.clone()).collect();
        let plan = Plan::new(&choices, e, x, wrong_combine);
        let n = self.group.ranks.len();
        let site = |s: &str| format!("layers.{l}.mlp.experts.{s}");
        let exchange = |s: &str, op, back_op, groups, route| Exchange {
            site: site(s),
            op,
            back_op,
            ranks: self.ranks().to_vec(),
            groups,
            route,
        };
        let int = |v: Vec<i64>| ints(v, self.device);
        let permuted = tape.per_rank(self.ranks(), &[hn], |i, v| {
            let [b, s, h] = v[0].dims();
            let tokens = plan.sent[i].iter().map(|r| r.token as i64).collect();
            let rows = v[0].clone().reshape([b * s, h]).select(0, int(tokens));
            Tensor::cat(vec![rows, self.constant(vec![0.0; h], [1, h])], 0).unsqueeze()
        });
        let to_a2a = exchange(
            "dispatch",
            "all_to_all",
            "all_to_all",
            x.ep_groups(n),
            plan.dispatch.clone(),
        );
        let mut rows = tape.exchange(comm, to_a2a, &permuted);
        if let Some((gather, _)) = &plan.etp {
            let ex = exchange(
                "in",
                "all_gather",
                "reduce_scatter",
                x.etp_groups(n),
                gather.clone(),
            );
            rows = tape.exchange(comm, ex, &rows);
        }
        let out = tape.per_rank(self.ranks(), &[&rows], |i, v| {
            let rows = &plan.computed[i];
            self.local_experts(i, l, v[0].clone().squeeze_dim(0), rows, how)
                .unsqueeze()
        });
        let mut back = out;
        if let Some((_, scatter)) = &plan.etp {
            let ex = exchange(
                "out",
                "reduce_scatter",
                "all_gather",
                x.etp_groups(n),
                scatter.clone(),
            );
            back = tape.exchange(comm, ex, &back);
        }
        let from_a2a = exchange(
            "combine",
            "all_to_all",
            "all_to_all",
            x.ep_groups(n),
            plan.combine.clone(),
        );
        let combined = tape.exchange(comm, from_a2a, &back);
        tape.per_rank(self.ranks(), &[&combined, hn, logits], |i, v| {
            let (routed, hn, logits) = (&v[0], &v[1], &v[2]);
            self.unpermute(routed, hn, logits, &plan.sent[i], &decided[i], how)
        })
    }

    /// A rank's combined expert outputs (`routed`, in the order its rows were sent) weighted
    /// by their routing scores and summed back into its tokens, shaped like `hn`.
    fn unpermute(
        &self,
        routed: &Tensor<3>,
        hn: &Tensor<3>,
        logits: &Tensor<3>,
        sent: &[Row],
        decided: &Decided,
        how: Dispatch,
    ) -> Tensor<3> {
        let e = self.model.experts.unwrap_or(1) as usize;
        let int = |v: Vec<i64>| ints(v, self.device);
        let [b, s, h] = hn.dims();
        let scores = moe::scores(logits.clone().reshape([b * s, e]), how.score);
        let kept = decided.kept.as_deref();
        let weights = moe::slot_weights(scores, &decided.choices, how.renormalize, kept);
        let slots = int(sent.iter().map(|r| r.slot as i64).collect());
        let tokens = int(sent.iter().map(|r| r.token as i64).collect());
        let y: Tensor<2> = routed.clone().squeeze_dim::<2>(0).narrow(0, 0, sent.len());
        let y = y * weights.select(0, slots);
        let zero = hn.clone().reshape([b * s, h]) * 0.0;
        zero.select_assign(0, tokens, y, IndexingUpdateOp::Add)
            .reshape([b, s, h])
    }
}

impl StageCtx<'_> {
    /// Rank `i`'s experts of layer `l` on the rows it received, `rows` their experts: each
    /// expert's MLP on its rows, in place. Group index i is the rank's place in its stage in
    /// Megatron's order (the group holds every replica when experts are parallel).
    fn local_experts(
        &self,
        i: usize,
        l: u32,
        input: Tensor<2>,
        rows: &[usize],
        how: Dispatch,
    ) -> Tensor<2> {
        let e = self.model.experts.unwrap_or(1) as usize;
        let x = self.topo.experts();
        let mut out = input.clone() * 0.0;
        let mine = x.ep_of(i);
        for expert in mine * (e / x.ep)..(mine + 1) * (e / x.ep) {
            let at: Vec<i64> = (0..rows.len())
                .filter(|&r| rows[r] == expert)
                .map(|r| r as i64)
                .collect();
            if at.is_empty() {
                continue;
            }
            let at = ints(at, self.device);
            let w =
                |part: &str| self.w(i, &format!("layers.{l}.mlp.experts.{expert}.{part}.weight"));
            let h = input.clone().select(0, at.clone()).unsqueeze::<3>();
            let y: Tensor<2> = (how.mlp)(h, w("gate"), w("up"), w("down")).squeeze_dim(0);
            out = out.select_assign(0, at, y, IndexingUpdateOp::Add);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_reach_their_experts_and_return() {
        // Two ranks, 4 experts on ep 2 (experts 0, 1 on rank 0), top-2.
        let choices = vec![vec![vec![2, 0], vec![1, 3]], vec![vec![3, 2]]];
        let plan = Plan::new(&choices, 4, Experts { ep: 2, etp: 1 }, false);
        // Rank 0 sends experts 0, 1 to itself and 2, 3 to rank 1.
        let experts: Vec<usize> = plan.sent[0].iter().map(|r| r.expert).collect();
        assert_eq!(experts, vec![0, 1, 2, 3]);
        assert_eq!(plan.computed[0], vec![0, 1]);
        assert_eq!(plan.computed[1], vec![2, 3, 2, 3]);
        // The combine is the dispatch transposed.
        assert_eq!(plan.combine.pieces, plan.dispatch.transpose(&[4, 2]).pieces);
    }

    #[test]
    fn etp_ranks_compute_the_same_rows() {
        let choices = vec![vec![vec![0]], vec![vec![1]], vec![vec![1]], vec![vec![0]]];
        let plan = Plan::new(&choices, 2, Experts { ep: 2, etp: 2 }, false);
        // ETP pairs (0, 1) and (2, 3); rank 0/1 hold expert 0, ranks 2/3 expert 1.
        assert_eq!(plan.computed[0], plan.computed[1]);
        assert_eq!(plan.computed[0], vec![0, 0]);
        assert_eq!(plan.computed[2], vec![1, 1]);
    }
}
