//! Global couplings in localization. Gradients have no order of cause among themselves: a
//! training loop that records them after clipping multiplies every one by the same clip
//! coefficient, so an error in one gradient (through the norm) or in a loss normalizer reaches
//! all of them, and the first one listed over the limit is rarely the one that is wrong. Here
//! each gradient of the step is tested against that explanation — the reference times one
//! common factor, to within the site limit — and the first gradient over the limit that the
//! common factor does not explain is the source.

use indexmap::IndexMap;

use crate::cause::fit;
use crate::cause::Values;
use meshparity_engine::tensor::HostTensor;
use meshparity_engine::TraceEntry;

/// A gradient the common factor does not explain, and what the others share.
#[derive(Clone, Debug, PartialEq)]
pub struct Coupled {
    /// Index (into the trace index's entries) of the source gradient.
    pub source: usize,
    /// Relative L2 of the source.
    pub value: f64,
    /// The factor every explained gradient is the reference times.
    pub factor: f64,
    /// How many gradients the factor explains.
    pub explained: usize,
}

/// Among the step's gradient entries over `limit`, the first one that a factor common to the
/// others does not explain, when at least two others share such a factor; `None` when there is
/// no common factor (the first over the limit stands) or it explains every one (the coupling
/// itself is what is wrong: the norm or the normalizer).
pub fn source(
    entries: &[TraceEntry],
    want: &IndexMap<String, HostTensor>,
    got: &IndexMap<String, HostTensor>,
    step: usize,
    limit: f64,
) -> Option<Coupled> {
    let prefix = format!("s{step}.grad.");
    // (entry index, relative L2, fitted factor, residual) of each gradient over the limit.
    let mut over = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if !e.like.starts_with(&prefix) || e.like.ends_with('%') {
            continue;
        }
        let (Some(r), Some(c)) = (want.get(&e.like), got.get(&e.key)) else {
            continue;
        };
        let (Some(r), Some(c)) = (Values::of(r), Values::of(c)) else {
            continue;
        };
        let rel = fit::rel(&c.data, &r.data);
        if rel > limit {
            let (k, residual) = fit::scale(&c.data, &r.data);
            over.push((i, rel, k, residual));
        }
    }
    // The common factor: the median of the factors of the gradients a factor explains.
    let mut factors: Vec<f64> = over
        .iter()
        .filter(|(_, _, _, res)| *res <= limit)
        .map(|(_, _, k, _)| *k)
        .collect();
    if factors.len() < 2 {
        return None;
    }
    factors.sort_by(f64::total_cmp);
    let factor = factors[factors.len() / 2];
    let explained = |k: f64, res: f64| res <= limit && (k / factor - 1.0).abs() <= 1e-3;
    let count = over.iter().filter(|o| explained(o.2, o.3)).count();
    if count < 2 {
        return None;
    }
    let (source, value, _, _) = *over.iter().find(|o| !explained(o.2, o.3))?;
    Some(Coupled {
        source,
        value,
        factor,
        explained: count,
    })
}
