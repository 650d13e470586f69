//! Hypotheses about where values sit: blocks that hold the sum of the blocks, one row block or
//! one shard that differs (or holds another's values), rows permuted or shifted, and — when
//! nothing about placement or scale explains the value — the computation that produced it.

use super::fit::{self, rel, Values};
use super::{cause, Axes, Cause, Evidence, Kind};

/// Every (dimension, axis, degree) a value could be sharded over.
fn shardings<'a>(
    v: &'a Values,
    axes: &'a Axes,
) -> impl Iterator<Item = (usize, &'static str, usize)> + 'a {
    (0..v.shape.len()).flat_map(move |d| {
        axes.degrees
            .iter()
            .filter(move |(_, n)| v.shape[d].is_multiple_of(*n) && v.shape[d] >= *n)
            .map(move |&(a, n)| (d, a, n))
    })
}

/// Every block holds the sum of the reference's blocks: an all-reduce where an all-gather
/// belongs.
pub fn reduced(e: &Evidence<'_>, axes: &Axes) -> Option<Cause> {
    for (d, a, n) in shardings(&e.reference, axes) {
        let (Some(rb), Some(cb)) = (e.reference.blocks(d, n), e.run.blocks(d, n)) else {
            continue;
        };
        let parts: Vec<&[f64]> = rb.iter().map(|b| b.data.as_slice()).collect();
        let total = fit::sum(&parts);
        let residual = cb.iter().map(|b| rel(&b.data, &total)).fold(0.0, f64::max)
            * fit::norm(&total)
            / e.reference.norm().max(f64::MIN_POSITIVE);
        if e.fits(residual) {
            return cause(
                Kind::Reduced,
                Some(a.to_owned()),
                format!(
                    "each of the {n} blocks of {} along dimension {d} holds the sum of the \
                     reference's blocks: an all-reduce over {a} where an all-gather belongs \
                     (the shards were summed, not concatenated)",
                    e.site
                ),
                residual,
            );
        }
    }
    None
}

/// The blocks of `c` that differ from `r`'s, and for each whether it holds another block.
fn odd_blocks(e: &Evidence<'_>, rb: &[Values], cb: &[Values]) -> Vec<(usize, Option<usize>)> {
    (0..cb.len())
        .filter(|&j| rel(&cb[j].data, &rb[j].data) > e.limit)
        .map(|j| {
            let other = (0..rb.len())
                .find(|&i| i != j && rel(&cb[j].data, &rb[i].data) <= e.limit.max(1e-12));
            (j, other)
        })
        .collect()
}

/// Each row block (a data-parallel replica's rows, or its microbatch's) is the reference's
/// times a factor of its own, the factors differing: each replica normalized by what it alone
/// holds (a loss averaged over its own tokens — a per-rank mean — where the global count
/// belongs). Claimed only where one factor for the whole value fits clearly worse: an even
/// split of the tokens is a plain scale ([`super::hypotheses`]' `scaled`).
pub fn block_scaled(e: &Evidence<'_>, _: &Axes) -> Option<Cause> {
    let (rb, cb) = (e.reference.blocks(0, e.blocks)?, e.run.blocks(0, e.blocks)?);
    let fits: Vec<(f64, f64)> = rb
        .iter()
        .zip(&cb)
        .map(|(r, c)| fit::scale(&c.data, &r.data))
        .collect();
    if fits.iter().any(|(k, _)| !k.is_finite()) {
        return None;
    }
    let rr: f64 = e.reference.data.iter().map(|v| v * v).sum();
    // Each block's residual is relative to its own reference block: back to absolute squares.
    let residual = rb
        .iter()
        .zip(&fits)
        .map(|(r, (_, res))| res * res * r.data.iter().map(|v| v * v).sum::<f64>())
        .sum::<f64>()
        .sqrt()
        / rr.sqrt();
    let (lo, hi) = fits
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (k, _)| {
            (lo.min(*k), hi.max(*k))
        });
    let (_, one) = fit::scale(&e.run.data, &e.reference.data);
    // Every block moved, by factors that differ: a block left as it was is one block's
    // difference (`one_block`: a rank's own epsilon, a microbatch sent twice).
    let distinct = (hi - lo) > 1e-3 * hi.abs().max(lo.abs())
        && fits.iter().all(|(k, _)| (k - 1.0).abs() > 1e-3);
    if !e.fits(residual) || !distinct || residual > 0.25 * one || lo <= 0.0 {
        return None;
    }
    let m = e.microbatches.max(1);
    let what = if m > 1 {
        "replica's microbatch"
    } else {
        "data-parallel replica"
    };
    let factors: Vec<String> = fits.iter().map(|(k, _)| format!("{k:.4}")).collect();
    cause(
        Kind::BlockScaled,
        Some("dp".into()),
        format!(
            "each {what}'s rows of {} are the reference's × a factor of their own ({}): \
             normalized by what each holds — a loss averaged over each rank's own tokens (a \
             per-rank mean) where the global count belongs",
            e.site,
            factors.join(", ")
        ),
        residual,
    )
}

/// Some row blocks (a replica's microbatches) differ while the others match.
pub fn one_block(e: &Evidence<'_>, _: &Axes) -> Option<Cause> {
    let (rb, cb) = (e.reference.blocks(0, e.blocks)?, e.run.blocks(0, e.blocks)?);
    let odd = odd_blocks(e, &rb, &cb);
    if odd.is_empty() || odd.len() == cb.len() {
        return None;
    }
    let m = e.microbatches.max(1);
    let name = |b: usize| format!("replica {} microbatch {}", b / m, b % m);
    if odd.iter().all(|(_, o)| o.is_some()) {
        let moved: Vec<String> = odd
            .iter()
            .map(|&(j, o)| format!("{} holds {}'s", name(j), name(o.expect("checked"))))
            .collect();
        return cause(
            Kind::Permuted,
            None,
            format!(
                "{}: {} rows — a send to or from the wrong peer, or the wrong microbatch",
                e.site,
                moved.join("; ")
            ),
            0.0,
        );
    }
    let list: Vec<String> = odd.iter().map(|&(j, _)| name(j)).collect();
    cause(
        Kind::OneBlock,
        None,
        format!(
            "{}: only the rows of {} differ, the other row blocks match — something local to \
             that rank or microbatch",
            e.site,
            list.join(", ")
        ),
        0.0,
    )
}

/// Some shards along a dimension differ while the others match (or hold another shard's).
pub fn one_shard(e: &Evidence<'_>, axes: &Axes) -> Option<Cause> {
    for (d, a, n) in shardings(&e.reference, axes) {
        let (Some(rb), Some(cb)) = (e.reference.blocks(d, n), e.run.blocks(d, n)) else {
            continue;
        };
        let odd = odd_blocks(e, &rb, &cb);
        if odd.is_empty() || odd.len() == n {
            continue;
        }
        if odd.iter().all(|(_, o)| o.is_some()) {
            let moved: Vec<String> = odd
                .iter()
                .map(|&(j, o)| format!("shard {j} holds shard {}", o.expect("checked")))
                .collect();
            return cause(
                Kind::Permuted,
                Some(a.to_owned()),
                format!(
                    "{} along dimension {d} in {n} {a} shards: {} — a rank placed at the wrong \
                     offset",
                    e.site,
                    moved.join(", ")
                ),
                0.0,
            );
        }
        let list: Vec<String> = odd
            .iter()
            .map(|&(j, _)| {
                let (k, res) = fit::scale(&cb[j].data, &rb[j].data);
                if res <= (0.1 * rel(&cb[j].data, &rb[j].data)).max(e.limit) {
                    format!("{a} rank {j}'s (its shard × {k:.4})")
                } else {
                    format!("{a} rank {j}'s")
                }
            })
            .collect();
        return cause(
            Kind::OneShard,
            Some(a.to_owned()),
            format!(
                "{}: only the shard of {} (block of {n} along dimension {d}) differs — \
                 something local to that rank",
                e.site,
                list.join(", ")
            ),
            0.0,
        );
    }
    None
}

/// Every row of the value is a row of the reference, in another order.
pub fn permuted(e: &Evidence<'_>, _: &Axes) -> Option<Cause> {
    let cols = *e.reference.shape.last()?;
    let rows = fit::match_rows(&e.run.data, &e.reference.data, cols, e.limit);
    if rows.is_empty() {
        return None;
    }
    let moved = rows
        .iter()
        .enumerate()
        .filter(|(i, r)| **r != Some(*i))
        .count();
    if rows.iter().all(Option::is_some) && moved > 0 {
        return cause(
            Kind::Permuted,
            None,
            format!(
                "{}: every row is a reference row, {moved} of {} in another place — a \
                 permutation applied wrongly (a dispatch or combine order, a rank's offset)",
                e.site,
                rows.len()
            ),
            0.0,
        );
    }
    // The rows matching none are zero ones (`match_rows`), the others are in place.
    let zero = rows.iter().filter(|r| r.is_none()).count();
    (zero > 0 && zero < rows.len()).then(|| Cause {
        kind: Kind::Zero,
        axis: None,
        text: format!(
            "{}: {} of {} rows are zero where the reference's are not, the others match — \
             tokens or rows dropped",
            e.site,
            zero,
            rows.len()
        ),
        residual: 0.0,
    })
}

/// The flattened values shifted by a few places or a block: shards cut at the wrong offset.
pub fn shifted(e: &Evidence<'_>, axes: &Axes) -> Option<Cause> {
    let len = e.reference.data.len();
    let cols = *e.reference.shape.last()?;
    let mut shifts: Vec<isize> = (1..=8).collect();
    shifts.extend((1..=4).map(|k| (k * cols) as isize));
    shifts.extend(axes.degrees.iter().map(|&(_, n)| (len / n) as isize));
    let (s, residual) = shifts
        .iter()
        .flat_map(|&s| [s, -s])
        .filter(|&s| s != 0)
        .map(|s| (s, fit::shifted(&e.run.data, &e.reference.data, s)))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    e.fits(residual).then(|| Cause {
        kind: Kind::Shifted,
        axis: None,
        text: format!(
            "{}: the values are the reference's moved by {s} places in flattened order — a \
             shard or buffer cut at the wrong offset",
            e.site
        ),
        residual,
    })
}

/// The output of a computation whose inputs agreed, which no placement or scale explains.
pub fn computation(e: &Evidence<'_>, _: &Axes) -> Option<Cause> {
    let computed = e.site.ends_with(".fwd.in")
        || e.site.ends_with(".bwd.in")
        || (e.site.ends_with(".out")
            && !e.site.ends_with("fwd.out")
            && !e.site.ends_with("bwd.out"));
    computed.then(|| Cause {
        kind: Kind::Computation,
        axis: None,
        text: format!(
            "the computation that produced {} differs: every traced value before it agreed, and \
             no missing reduction, scaling, stale value or moved rows explains it — the layer's \
             own arithmetic on this mesh (or a rank-local input it read) is wrong",
            e.site
        ),
        residual: f64::INFINITY,
    })
}
