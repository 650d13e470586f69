//! A run's training state as a checkpoint holds it: what a resumed run needs to go on as if
//! it had never stopped. Each rank's state is one map of host tensors:
//!
//! - every parameter and buffer under its own name, as the optimizer holds it (the f32 master
//!   copy of a half-precision parameter);
//! - `optim.exp_avg.NAME` and `optim.exp_avg_sq.NAME`, the AdamW moments (none for SGD);
//! - the counters, each a one-element u64: `optim.step` (updates done, which AdamW's bias
//!   correction counts), `optim.schedule_step` (where the learning-rate schedule stands),
//!   `data.position` (the next batch) and `rng.position` (the next step's dropout stream).
//!
//! Merged over a mesh's ranks it is world-size-1 shaped, the same for every layout, so a state
//! saved on one mesh is split for another ([`split`]) and compared entry by entry.

use burn::tensor::{DType, Device, Tensor};
use indexmap::IndexMap;
use meshparity_compare::TensorDtype;

use super::RunError;
use crate::host::{HostTensor, Param};
use crate::llama::is_buffer;
use crate::optim::{half, OptState};
use crate::sharding::{MergeError, ShardingPlan, Shards};

pub use meshparity_engine::optimizer::{EXP_AVG, EXP_AVG_SQ};
pub const STEP: &str = "optim.step";
pub const SCHEDULE: &str = "optim.schedule_step";
pub const DATA: &str = "data.position";
pub const RNG: &str = "rng.position";
const COUNTERS: [&str; 4] = [STEP, SCHEDULE, DATA, RNG];

/// Where a run's streams stand: the batch and the dropout stream of its next step. Both are
/// the step's number in an uninterrupted run, and a resumed run must take them from its
/// checkpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub data: u64,
    pub rng: u64,
}

/// One rank's state, in memory.
pub struct RankState {
    /// Parameters and buffers as the optimizer holds them (master weights).
    pub weights: IndexMap<String, Tensor<2>>,
    pub opt: OptState,
    pub cursor: Cursor,
}

/// A rank's state as host tensors (`shapes`: each parameter's logical shape on this rank).
pub fn to_host(state: &RankState, shapes: &impl Fn(&str, &Tensor<2>) -> Vec<usize>) -> Shards {
    let mut out = Shards::new();
    for (n, t) in &state.weights {
        out.insert(n.clone(), HostTensor::from_param(t, &shapes(n, t)));
    }
    for (n, (m, v)) in &state.opt.moments {
        let shape = shapes(n, m);
        out.insert(format!("{EXP_AVG}{n}"), HostTensor::from_param(m, &shape));
        out.insert(
            format!("{EXP_AVG_SQ}{n}"),
            HostTensor::from_param(v, &shape),
        );
    }
    let counters = [
        state.opt.step,
        state.opt.schedule_step,
        state.cursor.data,
        state.cursor.rng,
    ];
    for (name, value) in COUNTERS.into_iter().zip(counters) {
        out.insert(name.to_owned(), counter(value));
    }
    out
}

fn counter(value: u64) -> HostTensor {
    HostTensor {
        dtype: TensorDtype::U64,
        shape: vec![1],
        bytes: value.to_le_bytes().to_vec(),
    }
}

/// A counter's value; `None` when absent or not a one-element u64.
pub fn counter_of(state: &Shards, name: &str) -> Option<u64> {
    let t = state.get(name)?;
    let bytes: [u8; 8] = t.bytes.as_slice().try_into().ok()?;
    (t.dtype == TensorDtype::U64).then(|| u64::from_le_bytes(bytes))
}

/// A rank's saved state that cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("`{0}` has one AdamW moment of two in the checkpoint")]
    OneMoment(String),
    #[error("the checkpoint has no `{0}` counter")]
    NoCounter(&'static str),
}

/// A rank's host state back in memory, on `device`; the parameters in `dtype` (the master
/// weights of a half-precision model become its optimizer's master copy).
pub fn from_host(state: &Shards, device: &Device, dtype: DType) -> Result<RankState, StateError> {
    let mut weights = IndexMap::new();
    let mut moments: IndexMap<String, (Option<Tensor<2>>, Option<Tensor<2>>)> = IndexMap::new();
    for (name, t) in state {
        if COUNTERS.contains(&name.as_str()) {
            continue;
        }
        if let Some(p) = name.strip_prefix(EXP_AVG) {
            moments.entry(p.to_owned()).or_default().0 = Some(t.to_param(device));
        } else if let Some(p) = name.strip_prefix(EXP_AVG_SQ) {
            moments.entry(p.to_owned()).or_default().1 = Some(t.to_param(device));
        } else {
            weights.insert(name.clone(), t.to_param(device));
        }
    }
    let moments = moments
        .into_iter()
        .map(|(n, pair)| match pair {
            (Some(m), Some(v)) => Ok((n, (m, v))),
            _ => Err(StateError::OneMoment(n)),
        })
        .collect::<Result<_, _>>()?;
    let count = |name: &'static str| counter_of(state, name).ok_or(StateError::NoCounter(name));
    let opt = OptState {
        step: count(STEP)?,
        schedule_step: count(SCHEDULE)?,
        moments,
    };
    let cursor = Cursor {
        data: count(DATA)?,
        rng: count(RNG)?,
    };
    let weights = weights
        .into_iter()
        .map(|(n, w)| {
            let t = match half(dtype) {
                Some(low) if w.dtype() != dtype && !is_buffer(&n) => w.cast(low),
                _ => w,
            };
            (n, t)
        })
        .collect();
    Ok(RankState {
        weights,
        opt,
        cursor,
    })
}

/// The f32 master weights of a half-precision model's parameters, from a rank's host state.
pub fn master(state: &Shards, device: &Device, dtype: DType) -> IndexMap<String, Tensor<2>> {
    if half(dtype).is_none() {
        return IndexMap::new();
    }
    state
        .iter()
        .filter(|(n, t)| t.dtype == TensorDtype::F32 && !is_state_entry(n) && !is_buffer(n))
        .map(|(n, t)| (n.clone(), t.to_param(device)))
        .collect()
}

/// Whether `name` is an optimizer, data or random-stream entry rather than a parameter.
pub fn is_state_entry(name: &str) -> bool {
    name.starts_with(EXP_AVG) || name.starts_with(EXP_AVG_SQ) || COUNTERS.contains(&name)
}

/// Every rank's state → the world-size-1 state: parameters and moments merged as the plan
/// shards them (replicas must agree), counters the same on every rank.
pub fn merge(plan: &ShardingPlan, ranks: &[Shards]) -> Result<Shards, MergeError> {
    let part = |prefix: &str| -> Vec<Shards> {
        ranks
            .iter()
            .map(|r| {
                r.iter()
                    .filter_map(|(n, t)| Some((n.strip_prefix(prefix)?.to_owned(), t.clone())))
                    .filter(|(n, _)| !prefix.is_empty() || !is_state_entry(n))
                    .collect()
            })
            .collect()
    };
    let mut out = plan.merge(&part(""))?;
    for prefix in [EXP_AVG, EXP_AVG_SQ] {
        let moments = part(prefix);
        if moments.iter().all(IndexMap::is_empty) {
            continue;
        }
        for (n, t) in plan.merge(&moments)? {
            out.insert(format!("{prefix}{n}"), t);
        }
    }
    for name in COUNTERS {
        let first = ranks.first().and_then(|r| r.get(name));
        if let Some((rank, _)) = ranks.iter().enumerate().find(|(_, r)| r.get(name) != first) {
            return Err(MergeError::ReplicaMismatch {
                name: name.to_owned(),
                rank,
                first: 0,
            });
        }
        if let Some(t) = first {
            out.insert(name.to_owned(), t.clone());
        }
    }
    Ok(out)
}

/// The world-size-1 state → every rank's, for `plan`'s mesh: what loading the checkpoint
/// there gives each rank.
pub fn split(plan: &ShardingPlan, full: &Shards) -> Vec<Shards> {
    let part = |prefix: &str| -> Shards {
        full.iter()
            .filter_map(|(n, t)| Some((n.strip_prefix(prefix)?.to_owned(), t.clone())))
            .filter(|(n, _)| !prefix.is_empty() || !is_state_entry(n))
            .collect()
    };
    let mut ranks = plan.shard(&part(""));
    for prefix in [EXP_AVG, EXP_AVG_SQ] {
        let moments = part(prefix);
        if moments.is_empty() {
            continue;
        }
        for (rank, shards) in plan.shard(&moments).into_iter().enumerate() {
            for (n, t) in shards {
                ranks[rank].insert(format!("{prefix}{n}"), t);
            }
        }
    }
    for rank in &mut ranks {
        for name in COUNTERS {
            if let Some(t) = full.get(name) {
                rank.insert(name.to_owned(), t.clone());
            }
        }
    }
    ranks
}

/// Where `rank`'s entry `name` sits in the world-size-1 state: a moment where its parameter
/// does, a counter whole.
pub fn slice(plan: &ShardingPlan, rank: usize, name: &str) -> meshparity_engine::sharded::Slice {
    plan.slice(param_of(name), rank)
        .unwrap_or(meshparity_engine::sharded::Slice::Whole)
}

/// The world-size-1 shape of entry `name` (`t`: a rank's copy).
pub fn full_shape(plan: &ShardingPlan, name: &str, t: &HostTensor) -> Vec<usize> {
    let param = param_of(name);
    match plan.rules.iter().find(|r| r.name == param) {
        Some(r) => r.shape.clone(),
        None => t.shape.clone(),
    }
}

/// The parameter a state entry belongs to: a moment's parameter, any other entry itself.
pub fn param_of(name: &str) -> &str {
    name.strip_prefix(EXP_AVG)
        .or_else(|| name.strip_prefix(EXP_AVG_SQ))
        .unwrap_or(name)
}

/// The first parameter or buffer of `plan`'s model that `full` lacks: a checkpoint must hold
/// every one (a strict load).
pub fn missing<'p>(plan: &'p ShardingPlan, full: &Shards) -> Option<&'p str> {
    plan.rules
        .iter()
        .find(|r| !full.contains_key(&r.name))
        .map(|r| r.name.as_str())
}

/// Each rank's parameters, optimizer state and cursor from its host state.
type Restored = (
    Vec<IndexMap<String, Tensor<2>>>,
    Option<Vec<(OptState, IndexMap<String, Tensor<2>>)>>,
    Cursor,
);

pub(super) fn restore(
    ranks: &[Shards],
    device: &Device,
    dtype: DType,
) -> Result<Restored, RunError> {
    let mut params = Vec::new();
    let mut opts = Vec::new();
    let mut cursor = None;
    for (rank, host) in ranks.iter().enumerate() {
        let s =
            from_host(host, device, dtype).map_err(|source| RunError::State { rank, source })?;
        cursor.get_or_insert(s.cursor);
        params.push(s.weights);
        opts.push((s.opt, master(host, device, dtype)));
    }
    Ok((params, Some(opts), cursor.unwrap_or_default()))
}

/// Per-rank tensors as host shards, with the logical shapes of the rank's parameters.
pub(super) fn host_ranks(
    params: &[IndexMap<String, Tensor<2>>],
    tensors: &[IndexMap<String, Tensor<2>>],
) -> Vec<Shards> {
    params
        .iter()
        .zip(tensors)
        .map(|(p, ts)| {
            ts.iter()
                .map(|(n, t)| {
                    let shape = logical_shape(n, &p[n].dims());
                    (n.clone(), HostTensor::from_param(t, &shape))
                })
                .collect()
        })
        .collect()
}

/// The shape a checkpoint gives a rank's [r, c] parameter tensor: norm weights and buffers are
/// [1, n] parameters with logical shape [n].
pub(super) fn logical_shape(name: &str, dims: &[usize]) -> Vec<usize> {
    if name.contains("norm") || is_buffer(name) {
        vec![dims[1]]
    } else {
        dims.to_vec()
    }
}
