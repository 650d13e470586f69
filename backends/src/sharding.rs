//! Sharding plans: how every parameter of a full checkpoint maps to the ranks of a mesh, and
//! back.
//!
//! Ranks are ordered by [`meshparity_specs::MeshConfig::rank`], the project's one map
//! (Megatron-style, tensor-parallel fastest: rank = tp + TP·(cp + CP·(dp + DP·pp))). Data- and
//! context-parallel ranks hold replicas; tensor-parallel ranks hold the column (dim 1) or row
//! (dim 0) block of split weights; a pipeline stage holds its layers (the embedding on the first
//! stage, the final norm and output on the last).
//!
//! Under expert parallelism each expert lives on the ranks of its ep index (Megatron's expert
//! layout over a stage's ranks, etp fastest, then ep, then expert-dp), its MLP split over the
//! etp ranks (gate/up by columns, down by rows) and replicated over expert-dp.
//!
//! Merging takes each parameter from its owners and checks that every replica is bit-identical:
//! a saver that drops or duplicates shards is caught here, not silently averaged.

use indexmap::IndexMap;
use meshparity_specs::{MeshConfig, ModelConfig};

use crate::host::HostTensor;
use crate::llama::specs;

/// Where a parameter lives within a pipeline rank's tensor-parallel group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Every TP rank holds the whole tensor (norm weights).
    Replicated,
    /// TP rank i holds block i along this dimension.
    Split(usize),
    /// Expert `expert`'s weight under expert parallelism: held by the ranks of its ep index,
    /// etp rank a holding block a along `dim`.
    Expert { expert: usize, dim: usize },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub shape: Vec<usize>,
    pub placement: Placement,
    /// Pipeline rank (pp coordinate) that owns it.
    pub stage: usize,
    /// A second stage holding a copy (the last stage's copy of a tied embedding, whose
    /// gradient the two stages all-reduce: Megatron's embedding group).
    pub copy_stage: Option<usize>,
}

impl Rule {
    /// Whether pipeline stage `pp` holds it.
    pub fn on_stage(&self, pp: usize) -> bool {
        self.stage == pp || self.copy_stage == Some(pp)
    }
}

pub use meshparity_specs::Coord;

#[derive(Clone, Debug)]
pub struct ShardingPlan {
    pub mesh: MeshConfig,
    pub rules: Vec<Rule>,
    /// Routed experts per layer (0 for dense models).
    pub experts_per_layer: usize,
}

/// The expert index of `layers.N.mlp.experts.X.part.weight`.
fn expert_of(name: &str) -> usize {
    name.split('.')
        .nth(4)
        .and_then(|x| x.parse().ok())
        .expect("expert weights are named layers.N.mlp.experts.X.part.weight")
}

/// Why shards could not be merged back.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MergeError {
    #[error("rank {rank} lacks `{name}`, which its stage owns")]
    Missing { rank: usize, name: String },
    #[error("`{name}`: rank {rank} holds a replica that differs from rank {first}'s")]
    ReplicaMismatch {
        name: String,
        rank: usize,
        first: usize,
    },
    #[error("`{name}`: rank {rank} holds shape {got:?}, the plan says {want:?}")]
    Shape {
        name: String,
        rank: usize,
        got: Vec<usize>,
        want: Vec<usize>,
    },
    #[error("expected {want} ranks of shards, got {got}")]
    RankCount { want: usize, got: usize },
    #[error(
        "`{name}`: its {} (index {at} along dim {dim}; the vocabulary has {len}) holds a \
         nonzero value: the padding's logits reached the loss, so it trained",
        meshparity_engine::artifact::PADDING_TRAINED
    )]
    PaddingTrained {
        name: String,
        dim: usize,
        at: usize,
        len: usize,
    },
}

/// One rank's parameters.
pub use meshparity_engine::Shards;

impl ShardingPlan {
    pub fn llama(model: &ModelConfig, mesh: &MeshConfig) -> Self {
        // Layers go to stages in pipeline order; under the interleaved schedule stage s is
        // chunk s div pp of pipeline rank s mod pp.
        let per_stage = (model.layers / mesh.virtual_pp()) as usize;
        let (pp, layers) = (mesh.pp as usize, model.layers as usize);
        let last = pp - 1;
        let rules = specs(model)
            .into_iter()
            .map(|s| {
                let leaf = s.name.rsplit('.').nth(1).unwrap_or("");
                // Experts and the router are replicated (expert parallelism 1): every rank of a
                // stage holds every expert, whatever the TP degree.
                let expert = s.name.contains(".mlp.experts.") || s.name.contains(".mlp.router.");
                let placement = match (s.name.as_str(), leaf) {
                    _ if expert && mesh.ep * mesh.etp > 1 && s.name.contains(".experts.") => {
                        Placement::Expert {
                            expert: expert_of(&s.name),
                            dim: usize::from(leaf != "down"),
                        }
                    }
                    _ if expert => Placement::Replicated,
                    ("embed.weight", _) => Placement::Split(0), // vocab-parallel embedding
                    ("output.weight", _) => Placement::Split(1), // vocab-parallel output
                    (_, "q" | "k" | "v" | "gate" | "up") => Placement::Split(1), // column-parallel
                    (_, "o" | "down") => Placement::Split(0),   // row-parallel
                    _ => Placement::Replicated,                 // norms, router, experts
                };
                let stage = match s
                    .name
                    .split('.')
                    .nth(1)
                    .and_then(|l| l.parse::<usize>().ok())
                {
                    // The MTP layer (after the model's last) is the last stage's, as its head.
                    Some(layer) if s.name.starts_with("layers.") && layer < layers => {
                        layer / per_stage % pp
                    }
                    _ if s.name == "embed.weight" => 0,
                    _ => last,
                };
                let copy_stage =
                    (model.embedding_on_last_stage() && s.name == "embed.weight" && last > 0)
                        .then_some(last);
                Rule {
                    name: s.name,
                    shape: s.shape,
                    placement,
                    stage,
                    copy_stage,
                }
            })
            .collect();
        Self {
            mesh: *mesh,
            rules,
            experts_per_layer: model.experts.unwrap_or(0) as usize,
        }
    }

    pub fn world_size(&self) -> usize {
        self.mesh.world_size() as usize
    }

    pub fn coord(&self, rank: usize) -> Coord {
        self.mesh.coord(rank)
    }

    /// The shape a rank holds of a parameter: a split dimension that the blocks do not divide
    /// (a vocabulary not divisible by tp) is padded up to the next multiple, as Megatron pads
    /// its vocabulary, and the last blocks hold zero rows past the end.
    pub fn shard_shape(&self, rule: &Rule) -> Vec<usize> {
        let mut shape = rule.shape.clone();
        if let Placement::Split(dim) | Placement::Expert { dim, .. } = rule.placement {
            shape[dim] = shape[dim].div_ceil(self.blocks(rule));
        }
        shape
    }

    /// Which block of `rule` `rank` holds (0 for replicated tensors), or `None` when it holds
    /// none of it.
    pub fn block(&self, rule: &Rule, rank: usize) -> Option<usize> {
        let c = self.coord(rank);
        if !rule.on_stage(c.pp) {
            return None;
        }
        match rule.placement {
            Placement::Replicated => Some(0),
            Placement::Split(_) => Some(c.tp),
            Placement::Expert { expert, .. } => {
                let m = &self.mesh;
                let (ep, etp) = (m.ep as usize, m.etp as usize);
                // The rank's place in its stage, in Megatron's order (tp fastest, cp, dp).
                let j = c.tp + m.tp as usize * (c.cp + m.cp as usize * c.dp);
                let per = self.experts_per_layer / ep;
                (j / etp % ep == expert / per).then_some(j % etp)
            }
        }
    }

    /// Where `rank`'s copy of parameter `name` sits in the world-size-1 tensor, for a sharded
    /// checkpoint's index: the whole of it, or its block's range of the split dimension (the
    /// padding of a last block past the tensor's end left out). `None`: no such parameter.
    pub fn slice(&self, name: &str, rank: usize) -> Option<meshparity_engine::sharded::Slice> {
        use meshparity_engine::sharded::Slice;
        let r = self.rules.iter().find(|r| r.name == name)?;
        let block = self.block(r, rank)?;
        Some(match r.placement {
            Placement::Replicated => Slice::Whole,
            Placement::Split(dim) | Placement::Expert { dim, .. } => {
                let w = self.shard_shape(r)[dim];
                let start = (block * w).min(r.shape[dim]);
                let end = ((block + 1) * w).min(r.shape[dim]);
                Slice::Split {
                    dim,
                    range: start..end,
                }
            }
        })
    }

    /// Blocks a parameter is cut into.
    fn blocks(&self, rule: &Rule) -> usize {
        match rule.placement {
            Placement::Replicated => 1,
            Placement::Split(_) => self.mesh.tp as usize,
            Placement::Expert { .. } => self.mesh.etp as usize,
        }
    }

    /// Full checkpoint → every rank's shards.
    pub fn shard(&self, full: &Shards) -> Vec<Shards> {
        let mut split_cache: IndexMap<&str, Vec<HostTensor>> = IndexMap::new();
        // A buffer absent from `full` is none on every rank (optimizer moments have none for
        // the router's bias), as [`ShardingPlan::merge`] reads it.
        let rules: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| !crate::llama::is_buffer(&r.name) || full.contains_key(&r.name))
            .collect();
        for r in &rules {
            match r.placement {
                Placement::Split(dim) | Placement::Expert { dim, .. } => {
                    let n = self.blocks(r);
                    let padded = full[&r.name].pad(dim, self.shard_shape(r)[dim] * n);
                    split_cache.insert(&r.name, padded.split(dim, n));
                }
                Placement::Replicated => {}
            }
        }
        (0..self.world_size())
            .map(|rank| {
                rules
                    .iter()
                    .filter_map(|r| {
                        let block = self.block(r, rank)?;
                        let t = match r.placement {
                            Placement::Replicated => full[&r.name].clone(),
                            _ => split_cache[r.name.as_str()][block].clone(),
                        };
                        Some((r.name.clone(), t))
                    })
                    .collect()
            })
            .collect()
    }

    /// Every rank's shards → the full checkpoint, checking that replicas agree.
    pub fn merge(&self, ranks: &[Shards]) -> Result<Shards, MergeError> {
        if ranks.len() != self.world_size() {
            return Err(MergeError::RankCount {
                want: self.world_size(),
                got: ranks.len(),
            });
        }
        let mut out = Shards::new();
        for r in &self.rules {
            // Gradients hold no buffers (the router's bias): none on any rank is none merged.
            if crate::llama::is_buffer(&r.name) && ranks.iter().all(|s| !s.contains_key(&r.name)) {
                continue;
            }
            // Owners of block i: every rank holding block i (replicated: every rank of the
            // stage).
            let mut blocks: Vec<Option<(usize, &HostTensor)>> = vec![None; self.blocks(r)];
            let want = self.shard_shape(r);
            for (rank, shards) in ranks.iter().enumerate() {
                let Some(slot) = self.block(r, rank) else {
                    continue;
                };
                let t = shards.get(&r.name).ok_or_else(|| MergeError::Missing {
                    rank,
                    name: r.name.clone(),
                })?;
                if t.shape != want {
                    return Err(MergeError::Shape {
                        name: r.name.clone(),
                        rank,
                        got: t.shape.clone(),
                        want,
                    });
                }
                match blocks[slot] {
                    None => blocks[slot] = Some((rank, t)),
                    Some((first, kept)) if kept != t => {
                        return Err(MergeError::ReplicaMismatch {
                            name: r.name.clone(),
                            rank,
                            first,
                        })
                    }
                    Some(_) => {}
                }
            }
            let merged = match r.placement {
                Placement::Replicated => blocks[0].expect("every stage has ranks").1.clone(),
                Placement::Split(dim) | Placement::Expert { dim, .. } => {
                    let parts: Vec<HostTensor> = blocks
                        .iter()
                        .map(|b| b.expect("every tp block has an owner").1.clone())
                        .collect();
                    // A padded vocabulary's padding never enters the loss: a correct run
                    // leaves it zero, in weights, gradients and optimizer state alike.
                    let whole = HostTensor::concat(&parts, dim);
                    let len = r.shape[dim];
                    if let Some(at) = whole.nonzero_past(dim, len) {
                        return Err(MergeError::PaddingTrained {
                            name: r.name.clone(),
                            dim,
                            at,
                            len,
                        });
                    }
                    whole.truncate(dim, len)
                }
            };
            out.insert(r.name.clone(), merged);
        }
        Ok(out)
    }
}
