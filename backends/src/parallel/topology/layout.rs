//! A stage group seen from inside: which of its indices form the TP groups, the CP rings, the
//! replicas and the experts' groups. The stage's layers work on per-index tensors (index i is
//! the group's i-th rank); these say which indices a collective joins.

/// A stage group's ranks by index into the group: replicas × CP × TP, TP fastest (group index
/// i = (replica·CP + cp)·TP + tp). Built by [`Topology::layout`](super::Topology::layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
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

impl Layout {
    /// Ranks in the group.
    pub fn size(self) -> usize {
        self.tp * self.cp * self.replicas
    }

    /// One replica's layout (what a traced value's parts span).
    pub fn replica(self) -> Layout {
        Layout {
            replicas: 1,
            ..self
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
    /// into `Local::split`'s output.
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

    /// Run `f` on each group's ranks and parts (`groups` from [`Layout::tp_groups`] or
    /// [`Layout::cp_rings`]) and put its outputs back at the same indices.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_follow_the_rank_map() {
        let g = Layout {
            tp: 2,
            cp: 2,
            replicas: 1,
        };
        assert_eq!(g.tp_groups(), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(g.cp_rings(), vec![vec![0, 2], vec![1, 3]]);
        let out = Layout::each(
            &g.cp_rings(),
            &[10, 11, 12, 13],
            vec![0, 1, 2, 3],
            |r, p| {
                assert_eq!(r.len(), 2);
                p.into_iter().rev().collect()
            },
        );
        assert_eq!(out, vec![2, 3, 0, 1]);
        let two = Layout {
            tp: 2,
            cp: 2,
            replicas: 2,
        };
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
