//! Per-site traces for failure localization: the value at every collective's input and output
//! (forward) and at its gradients (backward), at every layer boundary and pipeline hand-off,
//! and every parameter's gradient as accumulated and as finalized, each canonicalized to what
//! a world-size-1 run holds there.
//!
//! Canonical forms, per TP group: replicated values are kept as *copies* (each compared to the
//! reference on its own, so one rank's divergence is not hidden by another's agreement);
//! partial sums are summed; sequence shards are concatenated. Across DP replicas and
//! microbatches, per-row values are concatenated in global row order, so the reference's
//! whole-batch value lines up. The oracle's trace comes from the same code on a 1×1 mesh.

use burn::tensor::Tensor;

use crate::parallel::context::restore;
use crate::parallel::topology::Layout;
use crate::positions::Positions;

/// A traced value, on the host in f64 (exact for every dtype the engine computes in).
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Value {
    pub fn of<const D: usize>(t: Tensor<D>) -> Value {
        let shape = t.dims().to_vec();
        let data = t
            .into_data()
            .convert::<f64>()
            .try_to_vec::<f64>()
            .expect("float tensors convert to f64");
        Value { shape, data }
    }

    /// Row blocks stacked along the first dimension.
    fn stack(parts: &[&Value]) -> Value {
        let mut shape = parts[0].shape.clone();
        shape[0] = parts.iter().map(|p| p.shape[0]).sum();
        let data = parts.iter().flat_map(|p| p.data.iter().copied()).collect();
        Value { shape, data }
    }
}

/// How a TP group's per-rank tensors become the world-size-1 value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Canon {
    /// Every rank holds the whole value: each copy is compared.
    Copies,
    /// Every rank holds a partial sum.
    Sum,
    /// Rank i holds block i along this dimension.
    Cat(usize),
}

/// The canonical value(s) of a group's tensors: `how` within each TP group, then (for one
/// replica of a stage group with cp > 1) the cp ranks' sequence entries put back in global
/// order, each at its `order` positions. Without a layout the parts are one group.
pub fn canon<const D: usize>(
    parts: &[Tensor<D>],
    how: Canon,
    layout: Option<Layout>,
    order: &[Positions],
) -> Vec<Value> {
    let g = match layout {
        Some(g) if g.cp > 1 => g,
        _ => return canon_tp(parts, how),
    };
    debug_assert_eq!(g.size(), parts.len(), "one replica's parts");
    // One TP group's value: copy `t`, or the group's merged value.
    let within = |group: &Vec<usize>, t: usize| -> Tensor<D> {
        let tp = group.iter().map(|&i| parts[i].clone());
        match how {
            Canon::Copies => parts[group[t]].clone(),
            Canon::Sum => tp.reduce(|a, b| a + b).expect("a group has ranks"),
            Canon::Cat(dim) => Tensor::cat(tp.collect(), dim),
        }
    };
    let copies = if how == Canon::Copies { g.tp } else { 1 };
    (0..copies)
        .map(|t| {
            Value::of(restore(
                g.tp_groups().iter().map(|grp| within(grp, t)).collect(),
                order,
            ))
        })
        .collect()
}

/// [`canon`] of one TP group.
fn canon_tp<const D: usize>(parts: &[Tensor<D>], how: Canon) -> Vec<Value> {
    match how {
        Canon::Copies => parts.iter().map(|t| Value::of(t.clone())).collect(),
        Canon::Sum => {
            let mut it = parts.iter().cloned();
            let first = it.next().expect("a group has ranks");
            vec![Value::of(it.fold(first, |a, b| a + b))]
        }
        Canon::Cat(dim) => vec![Value::of(Tensor::cat(parts.to_vec(), dim))],
    }
}

/// One site's value for one row block (a DP replica's microbatch) or for the whole step.
#[derive(Clone, Debug)]
pub struct Record {
    pub site: String,
    /// The reference site it is compared with, when not its own name (a pipeline hand-off).
    pub like: Option<String>,
    /// Row block: replica × microbatches + microbatch; `None` for step-wide values.
    pub block: Option<usize>,
    pub copies: Vec<Value>,
}

/// One compared value of a run's trace.
#[derive(Clone, Debug)]
pub struct Entry {
    /// `s{step}.{site}`, with `@{copy}` for each copy of a replicated value.
    pub key: String,
    /// The reference key it is compared with.
    pub like: String,
    /// Row blocks stacked in it (0: a step-wide value).
    pub blocks: usize,
    pub value: Value,
}

/// A step's records as entries, sites in order of first appearance.
pub fn merge(step: usize, records: Vec<Record>) -> Vec<Entry> {
    let mut order: Vec<String> = Vec::new();
    let mut by_site: std::collections::HashMap<String, Vec<Record>> = Default::default();
    for r in records {
        if !by_site.contains_key(&r.site) {
            order.push(r.site.clone());
        }
        by_site.entry(r.site.clone()).or_default().push(r);
    }
    let mut out = Vec::new();
    for site in order {
        let mut recs = by_site.remove(&site).expect("listed sites are present");
        recs.sort_by_key(|r| r.block);
        let like = format!(
            "s{step}.{}",
            recs[0].like.clone().unwrap_or_else(|| site.clone())
        );
        let blocked = recs[0].block.is_some();
        let copies = recs.iter().map(|r| r.copies.len()).max().unwrap_or(0);
        for k in 0..copies {
            let key = if copies == 1 {
                format!("s{step}.{site}")
            } else {
                format!("s{step}.{site}@{k}")
            };
            let parts: Vec<&Value> = recs
                .iter()
                .map(|r| &r.copies[k.min(r.copies.len() - 1)])
                .collect();
            let (value, blocks) = if blocked {
                (Value::stack(&parts), parts.len())
            } else {
                (parts[0].clone(), 0)
            };
            out.push(Entry {
                key,
                like: like.clone(),
                blocks,
                value,
            });
        }
    }
    out
}

pub use meshparity_engine::trace::STEPS;
