//! Sharded data parallelism's groups (ZeRO, FSDP, hybrid sharding): which ranks split one
//! parameter's flat elements between them, which hold copies of the same shard, and which
//! together hold one copy of every shard (the gradient norm's sum).
//!
//! Dense parameters shard over the data-parallel group with its context-parallel ranks
//! (Megatron's distributed optimizer over the dp × cp group; torchtitan's `dp_shard_cp` mesh),
//! or, with hybrid sharding, over `shard` consecutive data-parallel indices of it, replicated
//! across those groups (HSDP). Expert parameters under expert parallelism shard over their
//! expert-data-parallel group (Megatron's expert distributed optimizer).

use super::Topology;

/// One rank's shard group of one parameter: the members in group order, and its index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardGroup {
    pub ranks: Vec<usize>,
    pub index: usize,
}

impl Topology {
    /// The ZeRO stage (0: nothing sharded).
    pub fn zero(&self) -> u32 {
        self.mesh.zero
    }

    /// Data-parallel indices per dense shard group: hybrid `shard`, else the whole dp.
    pub fn shard_dp(&self) -> usize {
        self.mesh.shard_dp() as usize
    }

    /// The dense shard groups of TP shard (tp, pp): its dp × cp group cut into runs of
    /// `shard_dp` data-parallel indices (every cp rank of each). Empty without ZeRO.
    pub fn shard_groups(&self, tp: usize, pp: usize) -> Vec<Vec<usize>> {
        if self.zero() == 0 {
            return Vec::new();
        }
        let width = self.shard_dp() * self.cp();
        self.dp_cp_group(tp, pp)
            .chunks(width)
            .map(<[usize]>::to_vec)
            .collect()
    }

    /// The dense replicate groups of TP shard (tp, pp): the ranks at the same place of each
    /// shard group, which hold the same shard and all-reduce it (hybrid sharding only).
    pub fn replicate_groups(&self, tp: usize, pp: usize) -> Vec<Vec<usize>> {
        let shards = self.shard_groups(tp, pp);
        if shards.len() < 2 {
            return Vec::new();
        }
        (0..shards[0].len())
            .map(|i| shards.iter().map(|g| g[i]).collect())
            .collect()
    }

    /// The group `rank` shards a parameter over (`expert`: an expert's weight under expert
    /// parallelism), or `None` without ZeRO.
    pub fn shard_group(&self, rank: usize, expert: bool) -> Option<ShardGroup> {
        if self.zero() == 0 {
            return None;
        }
        let c = self.coord(rank);
        let groups = if expert && self.experts().parallel() {
            self.edp_groups(c.pp)
        } else {
            self.shard_groups(c.tp, c.pp)
        };
        groups.into_iter().find_map(|ranks| {
            let index = ranks.iter().position(|&r| r == rank)?;
            Some(ShardGroup { ranks, index })
        })
    }

    /// Under ZeRO, the ranks that together hold one copy of every dense gradient shard: each
    /// hybrid replica's ranks (every rank, without hybrid sharding). The dense norm's sum.
    pub fn sharded_model_groups(&self) -> Vec<Vec<usize>> {
        let per = self.shard_dp();
        let mut groups = vec![Vec::new(); self.dp() / per];
        for rank in 0..self.world() {
            groups[self.coord(rank).dp / per].push(rank);
        }
        groups
    }

    /// Under ZeRO with expert parallelism, the ranks that together hold one copy of every
    /// expert gradient shard: every rank (expert shards span the edp group, expert blocks the
    /// ep × etp × pp ranks). With `without_ep`, the ranks of each ep index: the group a norm
    /// that misses the expert-parallel axis reduces over.
    pub fn sharded_expert_groups(&self, without_ep: bool) -> Vec<Vec<usize>> {
        let x = self.experts();
        let keys = if without_ep { x.ep } else { 1 };
        let mut groups = vec![Vec::new(); keys];
        let stage_ranks = self.world() / self.pp();
        for rank in 0..self.world() {
            let j = rank % stage_ranks;
            let key = if without_ep { x.ep_of(j) } else { 0 };
            groups[key].push(rank);
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use meshparity_specs::MeshConfig;

    use super::*;

    fn mesh(dp: u32, cp: u32, tp: u32, zero: u32, shard: u32) -> Topology {
        Topology::new(&MeshConfig {
            dp,
            cp,
            tp,
            zero,
            shard,
            ..MeshConfig::DEFAULT
        })
    }

    #[test]
    fn dense_shards_span_dp_and_cp_and_hybrid_cuts_them() {
        let t = mesh(4, 1, 2, 1, 0);
        assert_eq!(t.shard_groups(1, 0), vec![vec![1, 3, 5, 7]]);
        assert!(t.replicate_groups(1, 0).is_empty());
        let g = t.shard_group(5, false).unwrap();
        assert_eq!((g.ranks, g.index), (vec![1, 3, 5, 7], 2));
        let h = mesh(4, 1, 1, 3, 2);
        assert_eq!(h.shard_groups(0, 0), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(h.replicate_groups(0, 0), vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(h.sharded_model_groups(), vec![vec![0, 1], vec![2, 3]]);
        let c = mesh(2, 2, 1, 2, 0);
        assert_eq!(c.shard_groups(0, 0), vec![vec![0, 1, 2, 3]]);
        assert_eq!(mesh(2, 1, 1, 0, 0).shard_group(1, false), None);
    }
}
