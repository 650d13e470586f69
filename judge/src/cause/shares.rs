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
    if microbatch_parts(e, axes) {
        return lost_microbatches(e);
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

/// Whether `e`'s parts are the microbatches' shares of an accumulated gradient: traced where
/// the gradient has no replicas to split it into (dp·cp = 1), one per microbatch.
fn microbatch_parts(e: &Evidence<'_>, axes: &Axes) -> bool {
    e.site.starts_with("grad.")
        && e.site.ends_with(".accumulated")
        && axes.degree("dp") * axes.degree("cp") == 1
        && e.microbatches > 1
        && e.parts.len() == e.microbatches
}

/// The reference is the sum of every microbatch's share while the value is the sum of some:
/// a run of consecutive microbatches never reached the accumulator (finalized before the last
/// ones arrived, or wiped by a reset before the later ones). Runs are tried shortest first,
/// from prefix sums: n(n+1)/2 candidates, so a spec with many microbatches stays cheap.
fn lost_microbatches(e: &Evidence<'_>) -> Option<Cause> {
    let (n, len) = (e.parts.len(), e.run.data.len());
    if e.parts.iter().any(|p| p.data.len() != len) {
        return None;
    }
    // prefix[i]: the sum of the first i shares.
    let mut prefix = vec![vec![0.0; len]];
    for p in &e.parts {
        let next: Vec<f64> = prefix[prefix.len() - 1]
            .iter()
            .zip(&p.data)
            .map(|(a, b)| a + b)
            .collect();
        prefix.push(next);
    }
    if rel(&prefix[n], &e.reference.data) > e.limit {
        return None;
    }
    let kept = |a: usize, b: usize| -> Vec<f64> {
        (0..len)
            .map(|i| prefix[n][i] - (prefix[b][i] - prefix[a][i]))
            .collect()
    };
    let (a, b, residual) = (1..n).find_map(|lost| {
        (0..=n - lost).find_map(|a| {
            let r = rel(&kept(a, a + lost), &e.run.data);
            (r <= e.limit && e.fits(r)).then_some((a, a + lost, r))
        })
    })?;
    let lost: Vec<String> = (a..b).map(|i| i.to_string()).collect();
    cause(
        Kind::PartScaled,
        None,
        format!(
            "{} holds the sum of only some of the {n} microbatches' shares: microbatch {} \
             never reached the accumulator — the gradients were finalized before it arrived, \
             or a reset between microbatches wiped what had accumulated",
            e.site,
            lost.join(", ")
        ),
        residual,
    )
}
