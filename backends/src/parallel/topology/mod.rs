//! The one owner of a mesh's rank groups, as Megatron's `parallel_state` and torch's
//! `DeviceMesh` are: built once from the mesh config, it says which global ranks form every
//! group (tensor-parallel, the context-parallel ring, data-parallel, pipeline stages, the
//! experts' groups) and decides once what applies (sequence parallelism, expert parallelism,
//! replicas in lockstep). Everything that runs a mesh asks it; nothing else derives a group.
//!
//! Ranks follow the project's one rank map ([`MeshConfig::rank`]): tensor parallel fastest,
//! then context parallel, data parallel, pipeline stage. Expert groups are carved out of each
//! stage's dense ranks in Megatron's order (expert-TP fastest, then EP, then expert-DP).
//!
//! - `layout.rs` — a stage group's ranks seen from inside: TP groups, CP rings, replicas,
//!   expert blocks, by index into the group;
//! - `shard.rs` — sharded data parallelism's groups (ZeRO, FSDP, hybrid sharding);
//! - `explain.rs` — every group of a mesh, printed (`meshparity plan --explain-mesh`).

mod explain;
mod layout;
mod shard;

use std::ops::Range;

use meshparity_specs::{Coord, MeshConfig};

pub use explain::Axis;
pub use layout::{Experts, Layout};
pub use shard::ShardGroup;

/// The rank groups of one mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    mesh: MeshConfig,
}

/// The ranks of one pipeline stage that compute a microbatch together: each replica's TP × CP
/// ranks (every replica's, in lockstep, under expert parallelism), in global rank order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageGroup {
    /// The stage's place in the pipeline: a virtual stage under the interleaved schedule.
    pub stage: usize,
    /// The pipeline rank (pp coordinate) that holds it.
    pub pp: usize,
    pub ranks: Vec<usize>,
    pub layout: Layout,
}

impl Topology {
    pub fn new(mesh: &MeshConfig) -> Self {
        Self { mesh: *mesh }
    }

    pub fn mesh(&self) -> &MeshConfig {
        &self.mesh
    }

    pub fn world(&self) -> usize {
        self.mesh.world_size() as usize
    }

    pub fn tp(&self) -> usize {
        self.mesh.tp as usize
    }

    pub fn cp(&self) -> usize {
        self.mesh.cp as usize
    }

    pub fn dp(&self) -> usize {
        self.mesh.dp as usize
    }

    pub fn pp(&self) -> usize {
        self.mesh.pp as usize
    }

    pub fn microbatches(&self) -> usize {
        self.mesh.microbatches as usize
    }

    /// Model chunks each pipeline rank holds: 1 unless the schedule is interleaved.
    pub fn chunks(&self) -> usize {
        self.mesh.chunks() as usize
    }

    /// Stages in pipeline order (virtual stages under the interleaved schedule): stage s runs
    /// on pipeline rank s mod pp, as its chunk s div pp (Megatron's layout: with 2 ranks and 2
    /// chunks, rank 0 holds stages 0 and 2, rank 1 stages 1 and 3).
    pub fn stages(&self) -> usize {
        self.mesh.virtual_pp() as usize
    }

    /// The pipeline rank that runs stage `stage`.
    pub fn pp_of(&self, stage: usize) -> usize {
        stage % self.pp()
    }

    /// The global rank at these coordinates.
    pub fn rank(&self, tp: usize, cp: usize, dp: usize, pp: usize) -> usize {
        self.mesh.rank(Coord { tp, cp, dp, pp })
    }

    pub fn coord(&self, rank: usize) -> Coord {
        self.mesh.coord(rank)
    }

    /// Whether sequence parallelism applies: asked for, and a TP group to shard over.
    pub fn sp(&self) -> bool {
        self.mesh.sp && self.mesh.tp > 1
    }

    /// The expert layout of every stage's ranks.
    pub fn experts(&self) -> Experts {
        Experts {
            ep: self.mesh.ep as usize,
            etp: self.mesh.etp as usize,
        }
    }

    /// Replicas that run in lockstep: all of them when tokens cross replicas (expert
    /// parallelism), else one.
    pub fn lockstep(&self) -> usize {
        if self.experts().parallel() {
            self.dp()
        } else {
            1
        }
    }

    /// The layout of a stage group of `replicas` replicas.
    pub fn layout(&self, replicas: usize) -> Layout {
        Layout {
            tp: self.tp(),
            cp: self.cp(),
            replicas,
        }
    }

    /// The tensor-parallel group at (cp, dp, pp).
    pub fn tp_group(&self, cp: usize, dp: usize, pp: usize) -> Vec<usize> {
        (0..self.tp()).map(|t| self.rank(t, cp, dp, pp)).collect()
    }

    /// Stage `stage`'s ranks of replicas `ds`: each replica's TP groups, one per cp index, on
    /// the pipeline rank that holds the stage.
    pub fn stage(&self, ds: Range<usize>, stage: usize) -> StageGroup {
        let replicas = ds.len();
        let pp = self.pp_of(stage);
        let ranks = ds
            .flat_map(|d| (0..self.cp()).flat_map(move |c| self.tp_group(c, d, pp)))
            .collect();
        StageGroup {
            stage,
            pp,
            ranks,
            layout: self.layout(replicas),
        }
    }

    /// Every replica's ranks of stage `pp` (the ranks expert groups are carved out of).
    pub fn whole_stage(&self, pp: usize) -> StageGroup {
        self.stage(0..self.dp(), pp)
    }

    /// The data-parallel group of the TP shard (tp, pp), context-parallel ranks included:
    /// the ranks holding replicas of the same parameters, whose gradients are all-reduced
    /// together (Megatron's data-parallel group with context parallelism).
    pub fn dp_cp_group(&self, tp: usize, pp: usize) -> Vec<usize> {
        (0..self.dp())
            .flat_map(|d| (0..self.cp()).map(move |c| (c, d)))
            .map(|(c, d)| self.rank(tp, c, d, pp))
            .collect()
    }

    /// The data-parallel group at (tp, cp, pp), without the context-parallel ranks.
    pub fn dp_group(&self, tp: usize, cp: usize, pp: usize) -> Vec<usize> {
        (0..self.dp()).map(|d| self.rank(tp, cp, d, pp)).collect()
    }

    /// The pipeline group at (tp, cp, dp): one rank per stage.
    pub fn pp_group(&self, tp: usize, cp: usize, dp: usize) -> Vec<usize> {
        (0..self.pp()).map(|s| self.rank(tp, cp, dp, s)).collect()
    }

    /// The embedding groups: the first and the last stage's rank at each (tp, cp, dp), which
    /// hold the two copies of a tied embedding (Megatron's embedding group). Empty with one
    /// stage, where one copy serves both uses.
    pub fn embedding_groups(&self) -> Vec<Vec<usize>> {
        if self.pp() < 2 {
            return Vec::new();
        }
        let last = self.pp() - 1;
        (0..self.dp())
            .flat_map(|d| (0..self.cp()).flat_map(move |c| (0..self.tp()).map(move |t| (t, c, d))))
            .map(|(t, c, d)| vec![self.rank(t, c, d, 0), self.rank(t, c, d, last)])
            .collect()
    }

    /// The model-parallel groups: the TP × PP ranks of each (dp, cp) replica, which hold
    /// different dense parts of the model.
    pub fn model_groups(&self) -> Vec<Vec<usize>> {
        (0..self.dp())
            .flat_map(|d| (0..self.cp()).map(move |c| (c, d)))
            .map(|(c, d)| {
                (0..self.pp())
                    .flat_map(|s| (0..self.tp()).map(move |t| (t, s)))
                    .map(|(t, s)| self.rank(t, c, d, s))
                    .collect()
            })
            .collect()
    }

    /// The expert-model-parallel groups: expert-TP × EP × PP of each expert-dp index, which
    /// hold different expert shards (Megatron's expert-tensor-model-pipeline group). With
    /// `without_ep`, expert-TP × PP of each (expert-dp, ep) index: the group a norm that misses
    /// the EP axis reduces over.
    pub fn expert_model_groups(&self, without_ep: bool) -> Vec<Vec<usize>> {
        let x = self.experts();
        let stages: Vec<Vec<usize>> = (0..self.pp()).map(|s| self.whole_stage(s).ranks).collect();
        let width = if without_ep { x.etp } else { x.ep * x.etp };
        (0..stages[0].len() / width)
            .map(|g| {
                stages
                    .iter()
                    .flat_map(|ranks| (g * width..(g + 1) * width).map(|j| ranks[j]))
                    .collect()
            })
            .collect()
    }

    /// Stage `pp`'s expert-data-parallel groups in global ranks: the ranks holding the same
    /// expert shard, whose expert gradients are all-reduced together.
    pub fn edp_groups(&self, pp: usize) -> Vec<Vec<usize>> {
        self.expert_groups(pp, Experts::edp_groups)
    }

    /// Stage `pp`'s groups of one expert family (`Experts::{ep,etp,edp}_groups`), in global
    /// ranks.
    fn expert_groups(
        &self,
        pp: usize,
        of: fn(Experts, usize) -> Vec<Vec<usize>>,
    ) -> Vec<Vec<usize>> {
        let ranks = self.whole_stage(pp).ranks;
        of(self.experts(), ranks.len())
            .into_iter()
            .map(|g| g.into_iter().map(|j| ranks[j]).collect())
            .collect()
    }

    /// The ranks holding each (dp, cp) replica's share of the loss: TP rank 0 of the last stage.
    pub fn loss_ranks(&self) -> Vec<usize> {
        (0..self.dp())
            .flat_map(|d| (0..self.cp()).map(move |c| (c, d)))
            .map(|(c, d)| self.rank(0, c, d, self.pp() - 1))
            .collect()
    }

    /// The ranks reporting each replica's loss: TP and CP rank 0 of the last stage.
    pub fn report_ranks(&self) -> Vec<usize> {
        (0..self.dp())
            .map(|d| self.rank(0, 0, d, self.pp() - 1))
            .collect()
    }

    /// The one rank a single-rank computation fault hits: the last rank of the first stage.
    pub fn odd_rank(&self) -> usize {
        self.rank(self.tp() - 1, self.cp() - 1, self.dp() - 1, 0)
    }
}

#[cfg(test)]
mod tests;
