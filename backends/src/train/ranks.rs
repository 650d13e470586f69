//! Every rank's parameters and optimizer through a mesh run, replicated or sharded (ZeRO): the
//! unshard before a step (ZeRO-3), each rank's update of what it holds, and the weights the
//! oracle level compares, merged from what each rank's optimizer holds.

use burn::tensor::Tensor;
use indexmap::IndexMap;
use meshparity_specs::Training;

use super::state::{host_ranks, logical_shape, to_host, Cursor, RankState};
use crate::optim::{OptState, Optimizer};
use crate::parallel::fault::ForeignState;
use crate::parallel::zero::{self, Sharded};
use crate::parallel::Comm;
use crate::sharding::Shards;

/// The ranks' state between steps.
pub(super) struct Ranks<'a> {
    /// Each rank's parameters as a step computes with them (unsharded under ZeRO-3).
    pub params: zero::Ranks,
    opts: Vec<Optimizer>,
    sharded: Option<Sharded<'a>>,
    dims: zero::Dims,
    /// ZeRO-3: each rank's own shards, kept between steps.
    owned: Option<zero::Ranks>,
}

impl<'a> Ranks<'a> {
    /// Every rank's state as host tensors, each with its logical shape.
    pub(super) fn host_state(&self, cursor: Cursor) -> Vec<Shards> {
        let shape = |n: &str, t: &Tensor<2>| logical_shape(n, &t.dims());
        let states = self.state(cursor);
        states.iter().map(|s| to_host(s, &shape)).collect()
    }

    pub fn new(
        params: Vec<IndexMap<String, Tensor<2>>>,
        training: &Training,
        sharded: Option<Sharded<'a>>,
    ) -> Self {
        let opts = params.iter().map(|_| Optimizer::new(training)).collect();
        let dims = zero::dims(&params);
        let owned = sharded
            .filter(|z| z.stage() == 3)
            .map(|z| shards_of(z, &params));
        Self {
            params,
            opts,
            sharded,
            dims,
            owned,
        }
    }

    /// Each rank's state for a checkpoint, as of `cursor`, in the mesh's layout without ZeRO: a
    /// sharded mesh's flat shards of the weights and moments are gathered back to each rank's
    /// whole tensors, so a checkpoint reads the same whatever the sharding it was saved from.
    pub fn state(&self, cursor: Cursor) -> Vec<RankState> {
        let weights = self.held_weights();
        let mut states: Vec<OptState> = self.opts.iter().map(Optimizer::state).collect();
        if let Some(z) = self.sharded {
            let part = |second: bool| -> zero::Ranks {
                let pick =
                    |(m, v): &(Tensor<2>, Tensor<2>)| if second { v.clone() } else { m.clone() };
                let held: zero::Ranks = states
                    .iter()
                    .map(|s| {
                        s.moments
                            .iter()
                            .map(|(n, m)| (n.clone(), pick(m)))
                            .collect()
                    })
                    .collect();
                z.gather(None, &held, &self.dims)
            };
            let (first, second) = (part(false), part(true));
            for ((s, m), v) in states.iter_mut().zip(first).zip(second) {
                s.moments = m
                    .into_iter()
                    .filter_map(|(n, m)| Some((n.clone(), (m, v.get(&n)?.clone()))))
                    .collect();
            }
        }
        weights
            .into_iter()
            .zip(states)
            .map(|(weights, opt)| RankState {
                weights,
                opt,
                cursor,
            })
            .collect()
    }

    /// Continue each rank's optimizer from a checkpoint's state (`master`: the f32 master
    /// weights of a half-precision model's parameters), both in the layout without ZeRO: a
    /// sharded mesh's optimizer keeps its flat shard of each.
    pub fn restore(&mut self, states: Vec<(OptState, IndexMap<String, Tensor<2>>)>) {
        let sharded = self.sharded;
        for (rank, (o, (mut state, master))) in self.opts.iter_mut().zip(states).enumerate() {
            let master = match sharded {
                None => master,
                Some(z) => {
                    let (m, v): (IndexMap<_, _>, IndexMap<_, _>) = state
                        .moments
                        .into_iter()
                        .map(|(n, (m, v))| ((n.clone(), m), (n, v)))
                        .unzip();
                    let (m, v) = (z.shard(rank, &m), z.shard(rank, &v));
                    state.moments = m
                        .into_iter()
                        .filter_map(|(n, m)| Some((n.clone(), (m, v.get(&n)?.clone()))))
                        .collect();
                    z.shard(rank, &master)
                }
            };
            o.restore(state, master);
        }
    }

    pub fn opts_mut(&mut self) -> &mut [Optimizer] {
        &mut self.opts
    }

    pub fn opts(&self) -> &[Optimizer] {
        &self.opts
    }

    /// ZeRO-3's unshard before `step`; with `check`, whether the parameters in use were not
    /// the all-gather of the shards (said in words).
    pub fn unshard(&mut self, comm: &mut Comm, step: usize, check: bool) -> Option<String> {
        let (z, shards) = (self.sharded?, self.owned.as_ref()?);
        let previous = (step > 0).then_some(&self.params);
        let params = z.unshard(comm, shards, &self.dims, previous);
        self.params = params;
        check.then(|| z.stale(step, &self.params, shards, &self.dims))?
    }

    /// The gradients whole, as the oracle compares them (gathered from the shards under ZeRO,
    /// where the step reduce-scattered them).
    pub fn whole(&self, grads: &zero::Ranks, backward: bool) -> zero::Ranks {
        match self.sharded {
            Some(z) if backward => z.gather(None, grads, &self.dims),
            _ => grads.clone(),
        }
    }

    /// Each rank's update of what it holds: its whole parameters, or (ZeRO) its own shard,
    /// then all-gathered (ZeRO-1/2) or kept sharded until the next step's unshard (ZeRO-3).
    /// Returns what each rank holds now.
    pub fn update(&mut self, comm: &mut Comm, grads: &zero::Ranks) -> &mut zero::Ranks {
        let Some(z) = self.sharded else {
            for ((p, g), opt) in self.params.iter_mut().zip(grads).zip(&mut self.opts) {
                opt.step(p, g);
            }
            return &mut self.params;
        };
        let mut shards = self
            .owned
            .take()
            .unwrap_or_else(|| shards_of(z, &self.params));
        let policy = comm.policies().optimizer;
        if policy.decays_exempt_shards {
            comm.event(
                "optimizer.decay",
                "flat shards decayed, the exempt norms included",
            );
            self.opts
                .iter_mut()
                .for_each(Optimizer::lose_decay_exemptions);
        }
        if let Some(state) = policy.foreign_state {
            comm.event(
                "optimizer.state",
                "moments taken from the neighbour shard's state",
            );
            foreign_state(z, &mut self.opts, state);
        }
        for ((s, g), opt) in shards.iter_mut().zip(grads).zip(&mut self.opts) {
            opt.step(s, g);
        }
        if z.stage() == 3 {
            self.owned.insert(shards)
        } else {
            self.params = z.gather(Some(comm), &shards, &self.dims);
            &mut self.params
        }
    }

    /// Each rank's AdamW first moments, whole (gathered from the shards under ZeRO); `None`
    /// before the first update and for SGD, which keeps none.
    pub fn moments(&self) -> Option<zero::Ranks> {
        let held: zero::Ranks = self
            .opts
            .iter()
            .map(|o| {
                o.moment_names()
                    .filter_map(|n| Some((n.to_owned(), o.moments(n)?.0.clone())))
                    .collect()
            })
            .collect();
        if held.iter().all(IndexMap::is_empty) {
            return None;
        }
        Some(match self.sharded {
            Some(z) => z.gather(None, &held, &self.dims),
            None => held,
        })
    }

    /// The weights now, as each rank's optimizer holds them (its master copy), merged from
    /// the shards under ZeRO: what the oracle level compares.
    pub fn weights(&self) -> Vec<Shards> {
        host_ranks(&self.params, &self.held_weights())
    }

    /// Each rank's whole weights as its optimizer holds them (gathered under ZeRO).
    fn held_weights(&self) -> zero::Ranks {
        match self.sharded {
            None => self
                .params
                .iter()
                .zip(&self.opts)
                .map(|(p, o)| o.weights(p))
                .collect(),
            Some(z) => {
                let shards = match &self.owned {
                    Some(s) => s.clone(),
                    None => shards_of(z, &self.params),
                };
                let w: zero::Ranks = shards
                    .iter()
                    .zip(&self.opts)
                    .map(|(s, o)| o.weights(s))
                    .collect();
                z.gather(None, &w, &self.dims)
            }
        }
    }
}

/// Every rank's parameters cut to its shards.
fn shards_of(z: Sharded<'_>, params: &zero::Ranks) -> zero::Ranks {
    params
        .iter()
        .enumerate()
        .map(|(r, p)| z.shard(r, p))
        .collect()
}

/// The catalogued `zero-foreign-optimizer-state`: a rank's moments of each parameter move
/// toward those of the previous rank of its shard group, whose shard of the same parameter
/// has the same width (flat shards are padded equal) — every rank's, or only the last rank's.
/// Each reads its neighbour's state as it was before any moved. Parameters a group of one
/// rank holds alone are left: there is no other shard to confuse.
fn foreign_state(z: Sharded, opts: &mut [Optimizer], state: ForeignState) {
    let last = opts.len() - 1;
    let victims: Vec<usize> = if state.every_rank {
        (0..opts.len()).collect()
    } else {
        vec![last]
    };
    let mut moves = Vec::new();
    for &victim in &victims {
        for name in opts[victim].moment_names() {
            let g = z.group(victim, name);
            let k = g.ranks.len();
            if k < 2 {
                continue;
            }
            let donor = g.ranks[(g.index + k - 1) % k];
            if let Some(moments) = opts[donor].moments(name) {
                moves.push((victim, name.to_owned(), moments.clone()));
            }
        }
    }
    for (victim, name, moments) in moves {
        opts[victim].blend_moments(&name, &moments, state.fraction);
    }
}
