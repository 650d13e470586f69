//! Context parallelism: how a sequence is split over the cp ranks and put back together.
//!
//! Causal attention makes late positions expensive (they see every earlier key), so a plain
//! split would leave the last rank with most of the work. Megatron/TransformerEngine balance it:
//! the sequence is cut into 2·cp chunks and rank c holds chunks c and 2·cp−1−c (the "zigzag").
//! Every per-token value a rank holds is in that local order; [`zigzag`] restores the global
//! order, so traces and logits line up with the world-size-1 oracle.
//!
//! Within a pipeline stage's group, ranks are ordered as the rank map orders them: tensor
//! parallel fastest, so group index i is (tp = i mod TP, cp = i div TP mod CP, replica =
//! i div TP·CP). A group usually holds one data-parallel replica; under expert parallelism every
//! replica of a stage runs in lockstep (tokens cross replicas in the all-to-all), so it holds
//! them all. [`Groups`] names the TP groups, the CP rings and, for the experts, Megatron's
//! expert groups (etp fastest, then ep, then expert-dp) in those indices.

use burn::tensor::Tensor;

use crate::data::Batch;

/// The replicas × CP × TP layout of a stage's ranks (group index i = (replica·CP + cp)·TP + tp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Groups {
    pub tp: usize,
    pub cp: usize,
    /// Data-parallel replicas in the group (1 unless experts are parallel).
    pub replicas: usize,
}

/// Megatron's expert layout of a stage's ranks: expert-TP fastest, then EP, then expert-DP
/// (`RankGenerator(tp=etp, ep=ep, dp=edp, order="tp-ep-dp")` over the stage's dense ranks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Experts {
    pub ep: usize,
    pub etp: usize,
}

impl Groups {
    /// The layout of `n` ranks holding `replicas` replicas of which `cp` are context-parallel.
    pub fn of(n: usize, cp: usize, replicas: usize) -> Self {
        Self {
            tp: n / (cp * replicas),
            cp,
            replicas,
        }
    }

    /// Group indices of each TP group, one per (replica, cp index).
    pub fn tp_groups(self) -> Vec<Vec<usize>> {
        (0..self.replicas * self.cp)
            .map(|s| (0..self.tp).map(|t| s * self.tp + t).collect())
            .collect()
    }

    /// Group indices of each CP ring, one per (replica, tp index), in ring order.
    pub fn cp_rings(self) -> Vec<Vec<usize>> {
        let (tp, cp) = (self.tp, self.cp);
        (0..self.replicas)
            .flat_map(|d| (0..tp).map(move |t| (0..cp).map(|c| (d * cp + c) * tp + t).collect()))
            .collect()
    }

    /// Group indices of each replica (the ranks holding parts of the same sequences under SP).
    pub fn replica_groups(self) -> Vec<Vec<usize>> {
        let n = self.tp * self.cp;
        (0..self.replicas)
            .map(|d| (d * n..(d + 1) * n).collect())
            .collect()
    }

    /// The share of the microbatch group index `i` holds: its (replica, cp index), as an index
    /// into [`Local::split`]'s output.
    pub fn local_of(self, i: usize) -> usize {
        i / self.tp
    }

    /// The cp index of group index `i`.
    pub fn cp_of(self, i: usize) -> usize {
        i / self.tp % self.cp
    }

    /// The replica (within the group) of group index `i`.
    pub fn replica_of(self, i: usize) -> usize {
        i / (self.tp * self.cp)
    }

    /// Run `f` on each group's ranks and parts (`groups` from [`Groups::tp_groups`] or
    /// [`Groups::cp_rings`]) and put its outputs back at the same indices.
    pub fn each<T>(
        groups: &[Vec<usize>],
        ranks: &[usize],
        parts: Vec<T>,
        mut f: impl FnMut(&[usize], Vec<T>) -> Vec<T>,
    ) -> Vec<T> {
        let mut slots: Vec<Option<T>> = parts.into_iter().map(Some).collect();
        for group in groups {
            let group_ranks: Vec<usize> = group.iter().map(|&i| ranks[i]).collect();
            let group_parts = group
                .iter()
                .map(|&i| slots[i].take().expect("groups are disjoint"))
                .collect();
            for (&i, out) in group.iter().zip(f(&group_ranks, group_parts)) {
                slots[i] = Some(out);
            }
        }
        slots
            .into_iter()
            .map(|s| s.expect("groups cover every rank"))
            .collect()
    }
}

impl Experts {
    /// Whether experts are split over ranks at all.
    pub fn parallel(self) -> bool {
        self.ep * self.etp > 1
    }

    /// The ep index of stage-local rank `j` (which block of experts it holds).
    pub fn ep_of(self, j: usize) -> usize {
        j / self.etp % self.ep
    }

    /// The etp index of stage-local rank `j` (which block of each expert's MLP it holds).
    pub fn etp_of(self, j: usize) -> usize {
        j % self.etp
    }

    /// The EP groups of `n` stage-local ranks: those exchanging tokens by all-to-all.
    pub fn ep_groups(self, n: usize) -> Vec<Vec<usize>> {
        let (ep, etp) = (self.ep, self.etp);
        (0..n / (ep * etp))
            .flat_map(|b| (0..etp).map(move |a| (0..ep).map(|e| a + etp * (e + ep * b)).collect()))
            .collect()
    }

    /// The ETP groups: those splitting the same experts' MLPs.
    pub fn etp_groups(self, n: usize) -> Vec<Vec<usize>> {
        let etp = self.etp;
        (0..n / etp)
            .map(|g| (0..etp).map(|a| a + etp * g).collect())
            .collect()
    }

    /// The expert-data-parallel groups: those holding the same expert shard (their gradients
    /// are all-reduced together), edp = n / (ep·etp) ranks each.
    pub fn edp_groups(self, n: usize) -> Vec<Vec<usize>> {
        let block = self.ep * self.etp;
        (0..block)
            .map(|s| (0..n / block).map(|b| s + block * b).collect())
            .collect()
    }
}

/// The absolute positions rank `c` of `cp` holds of a sequence of `seq_len`: chunks c and
/// 2·cp−1−c of 2·cp.
pub fn positions(c: usize, cp: usize, seq_len: usize) -> Vec<usize> {
    if cp == 1 {
        return (0..seq_len).collect();
    }
    let chunk = seq_len / (2 * cp);
    let second = 2 * cp - 1 - c;
    (c * chunk..(c + 1) * chunk)
        .chain(second * chunk..(second + 1) * chunk)
        .collect()
}

/// One cp rank's share of a microbatch: every row, its positions only.
#[derive(Clone, Debug)]
pub struct Local {
    /// Tokens and targets at this rank's positions (`seq_len` is the local length; `lengths`
    /// stay the rows' real lengths, which the masks compare positions with).
    pub batch: Batch,
    pub positions: Vec<usize>,
}

impl Local {
    /// Each (replica, cp rank)'s share of `mb`, whose rows are `replicas` replicas' rows one
    /// after the other.
    pub fn split(mb: &Batch, cp: usize, replicas: usize) -> Vec<Local> {
        let rows = mb.batch / replicas;
        (0..replicas)
            .flat_map(|d| Self::split_rows(&mb.rows(d * rows, rows), cp))
            .collect()
    }

    /// Each cp rank's share of `mb`.
    fn split_rows(mb: &Batch, cp: usize) -> Vec<Local> {
        (0..cp)
            .map(|c| {
                let positions = positions(c, cp, mb.seq_len);
                let pick = |v: &[i64]| -> Vec<i64> {
                    (0..mb.batch)
                        .flat_map(|b| positions.iter().map(move |&p| v[b * mb.seq_len + p]))
                        .collect()
                };
                Local {
                    batch: Batch {
                        batch: mb.batch,
                        seq_len: positions.len(),
                        tokens: pick(&mb.tokens),
                        targets: pick(&mb.targets),
                        lengths: mb.lengths.clone(),
                    },
                    positions,
                }
            })
            .collect()
    }
}

/// Per-cp-rank tensors (local order along dim 1) → the whole sequence in global order.
pub fn zigzag<const D: usize>(parts: Vec<Tensor<D>>) -> Tensor<D> {
    let cp = parts.len();
    if cp == 1 {
        return parts.into_iter().next().expect("one part");
    }
    let chunk = parts[0].dims()[1] / 2;
    let chunks: Vec<Tensor<D>> = (0..2 * cp)
        .map(|j| {
            if j < cp {
                parts[j].clone().narrow(1, 0, chunk)
            } else {
                parts[2 * cp - 1 - j].clone().narrow(1, chunk, chunk)
            }
        })
        .collect();
    Tensor::cat(chunks, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_balance_and_cover_the_sequence() {
        assert_eq!(positions(0, 2, 8), vec![0, 1, 6, 7]);
        assert_eq!(positions(1, 2, 8), vec![2, 3, 4, 5]);
        let mut all: Vec<usize> = (0..4).flat_map(|c| positions(c, 4, 16)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..16).collect::<Vec<_>>());
    }

    #[test]
    fn groups_follow_the_rank_map() {
        let g = Groups::of(4, 2, 1);
        assert_eq!(g.tp_groups(), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(g.cp_rings(), vec![vec![0, 2], vec![1, 3]]);
        let out = Groups::each(
            &g.cp_rings(),
            &[10, 11, 12, 13],
            vec![0, 1, 2, 3],
            |r, p| {
                assert_eq!(r.len(), 2);
                p.into_iter().rev().collect()
            },
        );
        assert_eq!(out, vec![2, 3, 0, 1]);
        let two = Groups::of(8, 2, 2);
        assert_eq!(two.cp_rings()[2], vec![4, 6]);
        assert_eq!(two.replica_groups()[1], vec![4, 5, 6, 7]);
        assert_eq!(
            (two.local_of(5), two.cp_of(5), two.replica_of(5)),
            (2, 0, 1)
        );
    }

    #[test]
    fn expert_groups_follow_megatron() {
        // 8 ranks, ep 2, etp 2: etp fastest, then ep, then edp.
        let x = Experts { ep: 2, etp: 2 };
        assert_eq!(
            x.etp_groups(8),
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]
        );
        assert_eq!(
            x.ep_groups(8),
            vec![vec![0, 2], vec![1, 3], vec![4, 6], vec![5, 7]]
        );
        assert_eq!(
            x.edp_groups(8),
            vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
        );
        assert_eq!((x.ep_of(6), x.etp_of(6)), (1, 0));
    }
}
