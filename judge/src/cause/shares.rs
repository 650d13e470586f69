//! Hypotheses against the parts whose sum the reference is (traced at `SITE%`: each TP rank's
//! partial sum, each replica's accumulated gradient): the value holds shares instead of their
//! sum, or one share is scaled before the reduction.

use super::fit::{self, rel};
use super::naming::{copy_axes, named};
use super::{cause, Axes, Cause, Evidence, Kind};

/// The value against the per-rank or per-replica parts whose sum the reference is: each of
/// its blocks one part's (a reduce-scatter or all-reduce that kept shares instead of summing),
/// or the reference a mix of the parts with one weight off (one replica's share scaled or
/// missing).
pub fn parts(e: &Evidence<'_>, axes: &Axes) -> Option<Cause> {
    if e.parts.len() < 2 {
        return None;
    }
    let axis = if e.site.starts_with("grad.") {
        let over = copy_axes(e.site, e.parts.len(), axes, &[]);
        over.iter()
            .map(|(a, _)| a.as_str())
            .collect::<Vec<_>>()
            .join("·")
    } else {
        "tp".to_owned()
    };
    shares(e, &axis).or_else(|| mixed(e, &axis, axes))
}

/// Each block of the value (the whole value, or one block per part along a dimension) is that
/// block of one part.
fn shares(e: &Evidence<'_>, axis: &str) -> Option<Cause> {
    let n = e.parts.len();
    let whole = |j: usize| {
        let owner = (0..n).find(|&p| rel(&e.run.data, &e.parts[p].data) <= e.limit)?;
        Some(vec![owner; j])
    };
    let by_dim = |d: usize| -> Option<Vec<usize>> {
        let cb = e.run.blocks(d, n)?;
        let pb: Vec<Vec<_>> = e
            .parts
            .iter()
            .map(|p| p.blocks(d, n))
            .collect::<Option<_>>()?;
        (0..n)
            .map(|j| (0..n).find(|&p| rel(&cb[j].data, &pb[p][j].data) <= e.limit))
            .collect()
    };
    let (owners, blocks) = match whole(1) {
        Some(o) => (o, None),
        None => (0..e.run.shape.len()).find_map(|d| Some((by_dim(d)?, Some(d))))?,
    };
    let held = match blocks {
        None => format!("holds only {axis} rank {}'s share of the sum", owners[0]),
        Some(d) if owners.iter().enumerate().all(|(j, &p)| j == p) => {
            format!("holds in each block along dimension {d} only that {axis} rank's own share")
        }
        Some(d) => {
            let list: Vec<String> = owners.iter().map(|p| p.to_string()).collect();
            format!(
                "holds in its blocks along dimension {d} the shares of {axis} ranks {}",
                list.join(", ")
            )
        }
    };
    cause(
        Kind::Partial,
        Some(axis.to_owned()),
        format!(
            "{} {held}: the reduction over {axis} kept shares instead of summing them (Partial \
             where Replicate belongs)",
            e.site
        ),
        0.0,
    )
}

/// The reference is the parts mixed with weights `w`, one or more not 1: those parts' shares
/// are off by `1/w`.
fn mixed(e: &Evidence<'_>, axis: &str, axes: &Axes) -> Option<Cause> {
    let slices: Vec<&[f64]> = e.parts.iter().map(|p| p.data.as_slice()).collect();
    let (w, residual) = fit::mix(&e.reference.data, &slices, &e.reference.data)?;
    let off: Vec<usize> = (0..w.len())
        .filter(|&i| (w[i] - 1.0).abs() > 0.01)
        .collect();
    let same = w.iter().all(|x| (x - w[0]).abs() <= 0.01);
    if off.is_empty() || same || !e.fits(residual) {
        return None;
    }
    let words: Vec<String> = off
        .iter()
        .map(|&i| {
            if w[i].abs() < 1e-12 {
                format!("{axis} rank {i}'s share should not be there")
            } else {
                let k = 1.0 / w[i];
                format!(
                    "{axis} rank {i}'s share ×{k:.4}{}",
                    named(k, axes, e.microbatches, e.site)
                )
            }
        })
        .collect();
    cause(
        Kind::PartScaled,
        Some(axis.to_owned()),
        format!(
            "{}: the reference is the sum of the run's shares once {} is undone — one \
             contribution scaled before the reduction",
            e.site,
            words.join(", ")
        ),
        residual,
    )
}
