//! Every group of a mesh by name, printable: what `meshparity plan --explain-mesh` shows, so a
//! user can check which ranks the engine reduces over against their own stack's groups.

use std::fmt::Write as _;

use serde::Serialize;

use super::Topology;

/// A family of rank groups, by its name in Megatron's `parallel_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    Tp,
    Cp,
    Dp,
    DpCp,
    Pp,
    TpCp,
    Mp,
    Etp,
    Ep,
    Edp,
    ExpertMp,
    Shard,
    Replicate,
    Embedding,
}

impl Axis {
    pub const ALL: [Axis; 14] = [
        Axis::Tp,
        Axis::Cp,
        Axis::Dp,
        Axis::DpCp,
        Axis::Pp,
        Axis::TpCp,
        Axis::Mp,
        Axis::Etp,
        Axis::Ep,
        Axis::Edp,
        Axis::ExpertMp,
        Axis::Shard,
        Axis::Replicate,
        Axis::Embedding,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Axis::Tp => "tp",
            Axis::Cp => "cp",
            Axis::Dp => "dp",
            Axis::DpCp => "dp-cp",
            Axis::Pp => "pp",
            Axis::TpCp => "tp-cp",
            Axis::Mp => "mp",
            Axis::Etp => "etp",
            Axis::Ep => "ep",
            Axis::Edp => "edp",
            Axis::ExpertMp => "expert-mp",
            Axis::Shard => "shard",
            Axis::Replicate => "replicate",
            Axis::Embedding => "embedding",
        }
    }

    /// What the engine does over each group of the family.
    pub fn meaning(self) -> &'static str {
        match self {
            Axis::Tp => {
                "tensor-parallel: split weights; activation collectives (SP's gather and scatter)"
            }
            Axis::Cp => "context-parallel ring: K/V passed around, sequence chunks",
            Axis::Dp => "data-parallel replicas (context-parallel ranks apart)",
            Axis::DpCp => "gradient all-reduce of dense parameters: data × context parallel",
            Axis::Pp => "pipeline: one rank per stage, activations forward and gradients back",
            Axis::TpCp => "a stage's ranks in one replica: one microbatch's work together",
            Axis::Mp => "model-parallel (TP × PP): the dense gradient norm's sum",
            Axis::Etp => "expert-tensor-parallel: split experts' MLPs",
            Axis::Ep => "expert-parallel: tokens to their experts' ranks (all-to-all)",
            Axis::Edp => "expert-data-parallel: expert gradients' all-reduce",
            Axis::ExpertMp => {
                "expert-model-parallel (ETP × EP × PP): the experts' gradient norm's sum"
            }
            Axis::Shard => {
                "ZeRO/FSDP shards of dense parameters: gradients reduce-scattered, parameters all-gathered"
            }
            Axis::Replicate => "hybrid sharding: each shard all-reduced across the shard groups",
            Axis::Embedding => "first and last stage: a tied embedding's gradient all-reduce",
        }
    }

    fn experts(self) -> bool {
        matches!(self, Axis::Etp | Axis::Ep | Axis::Edp | Axis::ExpertMp)
    }
}

/// One family's groups, in global ranks.
#[derive(Clone, Debug, Serialize)]
pub struct Family {
    pub axis: Axis,
    pub what: &'static str,
    pub groups: Vec<Vec<usize>>,
}

/// A mesh's ranks and groups.
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    pub world_size: usize,
    pub sp: bool,
    pub experts_parallel: bool,
    /// Each global rank's (tp, cp, dp, pp).
    pub ranks: Vec<[usize; 4]>,
    /// Under the interleaved schedule, the pipeline stages (virtual stages, in pipeline order)
    /// each pp rank holds as its model chunks; empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<Vec<usize>>,
    pub groups: Vec<Family>,
}

impl Topology {
    /// Every group of `axis`, in global ranks (empty for the experts' families when experts
    /// are not parallel).
    pub fn groups(&self, axis: Axis) -> Vec<Vec<usize>> {
        let (tp, cp, dp, pp) = (self.tp(), self.cp(), self.dp(), self.pp());
        let every = |f: &dyn Fn(usize, usize, usize) -> Vec<usize>, a, b, c| {
            let mut out = Vec::new();
            for z in 0..c {
                for y in 0..b {
                    for x in 0..a {
                        out.push(f(x, y, z));
                    }
                }
            }
            out
        };
        if axis.experts() && !self.experts().parallel() {
            return Vec::new();
        }
        let stages = |f: &dyn Fn(usize) -> Vec<Vec<usize>>| (0..pp).flat_map(f).collect();
        match axis {
            Axis::Tp => every(&|c, d, s| self.tp_group(c, d, s), cp, dp, pp),
            Axis::Cp => every(
                &|t, d, s| (0..cp).map(|c| self.rank(t, c, d, s)).collect(),
                tp,
                dp,
                pp,
            ),
            Axis::Dp => every(&|t, c, s| self.dp_group(t, c, s), tp, cp, pp),
            Axis::DpCp => every(&|t, s, _| self.dp_cp_group(t, s), tp, pp, 1),
            Axis::Pp => every(&|t, c, d| self.pp_group(t, c, d), tp, cp, dp),
            Axis::TpCp => every(&|d, s, _| self.stage(d..d + 1, s).ranks, dp, pp, 1),
            Axis::Mp => self.model_groups(),
            Axis::Etp => stages(&|s| self.expert_groups(s, super::Experts::etp_groups)),
            Axis::Ep => stages(&|s| self.expert_groups(s, super::Experts::ep_groups)),
            Axis::Edp => stages(&|s| self.edp_groups(s)),
            Axis::ExpertMp => self.expert_model_groups(false),
            Axis::Shard => (0..pp)
                .flat_map(|s| (0..tp).flat_map(move |t| self.shard_groups(t, s)))
                .collect(),
            Axis::Replicate => (0..pp)
                .flat_map(|s| (0..tp).flat_map(move |t| self.replicate_groups(t, s)))
                .collect(),
            Axis::Embedding => self.embedding_groups(),
        }
    }

    pub fn explain(&self) -> Explanation {
        let groups = Axis::ALL
            .into_iter()
            .map(|axis| Family {
                axis,
                what: axis.meaning(),
                groups: self.groups(axis),
            })
            .filter(|f| !f.groups.is_empty())
            .collect();
        Explanation {
            world_size: self.world(),
            sp: self.sp(),
            experts_parallel: self.experts().parallel(),
            ranks: (0..self.world())
                .map(|r| {
                    let c = self.coord(r);
                    [c.tp, c.cp, c.dp, c.pp]
                })
                .collect(),
            chunks: if self.chunks() > 1 {
                (0..self.pp())
                    .map(|p| (0..self.stages()).filter(|&s| self.pp_of(s) == p).collect())
                    .collect()
            } else {
                Vec::new()
            },
            groups,
        }
    }
}

impl Explanation {
    /// The text form: the rank map, then each family's groups, one line each.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} ranks; sequence parallelism {}; experts {}",
            self.world_size,
            if self.sp { "on" } else { "off" },
            if self.experts_parallel {
                "parallel"
            } else {
                "replicated"
            },
        );
        let _ = writeln!(out, "\nranks (tp fastest, then cp, dp, pp):");
        for (r, [t, c, d, p]) in self.ranks.iter().enumerate() {
            let _ = writeln!(out, "  {r:>4}  tp{t} cp{c} dp{d} pp{p}");
        }
        if !self.chunks.is_empty() {
            let _ = writeln!(
                out,
                "\npipeline stages (interleaved: {} model chunks per pp rank):",
                self.chunks[0].len()
            );
            for (p, stages) in self.chunks.iter().enumerate() {
                let listed: Vec<String> = stages.iter().map(usize::to_string).collect();
                let _ = writeln!(out, "  pp{p}  stages {}", listed.join(" "));
            }
        }
        let _ = writeln!(out, "\ngroups:");
        for f in &self.groups {
            let size = f.groups.first().map_or(0, Vec::len);
            let _ = writeln!(
                out,
                "  {:<9} {} group(s) of {}: {}",
                f.axis.name(),
                f.groups.len(),
                size,
                f.what
            );
            let listed: Vec<String> = f
                .groups
                .iter()
                .map(|g| {
                    let ranks: Vec<String> = g.iter().map(usize::to_string).collect();
                    format!("[{}]", ranks.join(" "))
                })
                .collect();
            let _ = writeln!(out, "            {}", listed.join(" "));
        }
        out
    }
}
