//! The hypotheses, most specific first: each returns the cause it names when its fit explains
//! the first diverging value (`Evidence::fits`), `None` otherwise.

use super::fit::{self, rel};
use super::naming::{copy_axes, factor};
use super::placement::{
    block_scaled, computation, one_block, one_shard, permuted, reduced, shifted,
};
use super::shares::parts;
use super::{cause, Axes, Cause, Evidence, Kind};

type Hypothesis = fn(&Evidence<'_>, &Axes) -> Option<Cause>;

pub const ALL: &[Hypothesis] = &[
    one_copy,
    zero,
    partial,
    partial_norm,
    parts,
    other_step,
    block_scaled,
    scaled,
    reduced,
    one_block,
    one_shard,
    permuted,
    shifted,
    computation,
];

fn zero(e: &Evidence<'_>, _: &Axes) -> Option<Cause> {
    let r = e.reference.norm();
    (r > 0.0 && e.run.norm() <= 1e-3 * r).then(|| Cause {
        kind: Kind::Zero,
        axis: None,
        text: format!(
            "{} is zero where the reference is not: what should produce it (a send, a \
             reduction, an accumulation) never arrived",
            e.site
        ),
        residual: e.run.norm() / r,
    })
}

/// Groups of copies that differ only along each axis (and all copies as one group), with the
/// axis named.
fn groupings(over: &[(String, usize)]) -> Vec<(String, Vec<Vec<usize>>)> {
    let n: usize = over.iter().map(|(_, d)| d).product();
    let mut out = Vec::new();
    if over.len() > 1 {
        for (i, (axis, size)) in over.iter().enumerate() {
            let stride: usize = over[i + 1..].iter().map(|(_, d)| d).product();
            let groups = (0..n)
                .filter(|k| (k / stride).is_multiple_of(*size))
                .map(|base| (0..*size).map(|t| base + t * stride).collect())
                .collect();
            out.push((axis.clone(), groups));
        }
    }
    let all: Vec<&str> = over.iter().map(|(a, _)| a.as_str()).collect();
    out.push((all.join("·"), vec![(0..n).collect()]));
    out
}

fn one_copy(e: &Evidence<'_>, axes: &Axes) -> Option<Cause> {
    if e.copies.len() < 2 {
        return None;
    }
    let off: Vec<usize> = (0..e.copies.len())
        .filter(|&k| rel(&e.copies[k].data, &e.reference.data) > e.limit)
        .collect();
    if off.is_empty() || off.len() == e.copies.len() {
        return None;
    }
    let over = copy_axes(e.site, e.copies.len(), axes, &e.over);
    let names: Vec<&str> = over.iter().map(|(a, _)| a.as_str()).collect();
    let list: Vec<String> = off.iter().map(|k| k.to_string()).collect();
    cause(
        Kind::OneCopy,
        None,
        format!(
            "copies {} of {} (over {}) differ while the others match the reference: a rank-local \
             computation or state on that rank, not a collective",
            list.join(", "),
            e.copies.len(),
            names.join("×")
        ),
        0.0,
    )
}

/// Each group of copies sums (or averages) to the reference: the value is Partial over the
/// group's axis where Replicate belongs.
fn partial(e: &Evidence<'_>, axes: &Axes) -> Option<Cause> {
    if e.copies.len() < 2 || !e.copies_disagree(false) {
        return None;
    }
    let over = copy_axes(e.site, e.copies.len(), axes, &e.over);
    for (axis, groups) in groupings(&over) {
        for (how, mean) in [("sum", false), ("average", true)] {
            let residual = groups
                .iter()
                .map(|g| {
                    let parts: Vec<&[f64]> =
                        g.iter().map(|&k| e.copies[k].data.as_slice()).collect();
                    let mut s = fit::sum(&parts);
                    if mean {
                        s.iter_mut().for_each(|v| *v /= g.len() as f64);
                    }
                    rel(&s, &e.reference.data)
                })
                .fold(0.0, f64::max);
            if e.fits(residual) {
                return cause(
                    Kind::Partial,
                    Some(axis.clone()),
                    format!(
                        "{} is Partial over {axis} where Replicate belongs: its copies differ and \
                         their {how} is the reference — an all-reduce ({how}) over {axis} is \
                         missing",
                        e.site
                    ),
                    residual,
                );
            }
        }
    }
    None
}

/// Each rank's norm covers its own shards only: the squares of the copies sum to the square of
/// the reference, counted once per replica — or, where that count does not fit (a norm that
/// misses one axis only), the copies differ and none exceeds the reference.
fn partial_norm(e: &Evidence<'_>, axes: &Axes) -> Option<Cause> {
    let r = e.reference.data.first().copied()?;
    if e.copies.len() < 2 || e.reference.data.len() != 1 || r <= 0.0 || !e.copies_disagree(true) {
        return None;
    }
    let squares: f64 = e.copies.iter().map(|c| c.data[0] * c.data[0]).sum();
    let q = (squares / (r * r)).round().max(1.0);
    let residual = ((squares / q).sqrt() - r).abs() / r;
    let split: Vec<&str> = ["tp", "pp", "ep", "etp"]
        .into_iter()
        .filter(|a| axes.degree(a) > 1)
        .collect();
    let axis = split.join("·");
    if e.fits(residual) {
        return cause(
            Kind::PartialNorm,
            Some(axis.clone()),
            format!(
                "each rank's {} covers only its own shards: the squares of the {} copies sum to \
                 the reference's ({q} times) — the sum of squares is not all-reduced over the \
                 ranks that split the parameters ({axis})",
                e.site,
                e.copies.len()
            ),
            residual,
        );
    }
    let below = e.copies.iter().all(|c| c.data[0] <= r * (1.0 + e.limit));
    below.then(|| Cause {
        kind: Kind::PartialNorm,
        axis: None,
        text: format!(
            "the {} copies of {} differ and none exceeds the reference: each rank's sum of \
             squares covers part of the parameters — a reduction over some of the ranks that \
             split them ({axis}) is missing",
            e.copies.len(),
            e.site
        ),
        residual: f64::INFINITY,
    })
}

fn other_step(e: &Evidence<'_>, _: &Axes) -> Option<Cause> {
    let (s, residual) = e
        .other_steps
        .iter()
        .map(|(s, v)| (*s, rel(&e.run.data, &v.data)))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    if !e.fits(residual) {
        return None;
    }
    let when = if s + 1 == e.step {
        "one step earlier: stale by one update (an update, unshard or copy that did not happen)"
            .to_owned()
    } else if s > e.step {
        format!("at step {s}: ahead of the run (a counter or schedule advanced too often)")
    } else {
        format!("at step {s}: stale by {} updates", e.step - s)
    };
    cause(
        Kind::OtherStep,
        None,
        format!(
            "{} at step {} is the reference's value {when}",
            e.site, e.step
        ),
        residual,
    )
}

fn scaled(e: &Evidence<'_>, axes: &Axes) -> Option<Cause> {
    let (k, residual) = fit::scale(&e.run.data, &e.reference.data);
    if !e.fits(residual) || (k - 1.0).abs() <= 1e-3 {
        return None;
    }
    let (axis, words) = match factor(k, axes, e.microbatches, e.site) {
        Some((label, words)) => {
            let why = if label.starts_with("1/") && !label.contains("microbatches") {
                format!(
                    ": averaged over {} where it should be summed, or divided once too often",
                    &label[2..]
                )
            } else if axes.degrees.iter().any(|(a, _)| *a == label) {
                format!(": summed over {label} where it should be averaged, or reduced twice")
            } else {
                ": a normalizer counting the wrong number of microbatches or tokens".to_owned()
            };
            (Some(label), format!("{words}{why}"))
        }
        // A few numbers always fit some scale: only a factor of the mesh says anything.
        None if e.run.data.len() < 4 => return None,
        None => (
            None,
            "a factor no degree of this mesh explains (a wrong constant, or one rank's value \
             scaled)"
                .to_owned(),
        ),
    };
    cause(
        Kind::Scaled,
        axis,
        format!("{} is the reference × {k:.4} ({words})", e.site),
        residual,
    )
}
