//! A curve level's loss curves as SVG polylines for the HTML report: the oracle's and the
//! mesh's on one axis, and their per-step relative difference on a log axis of its own.

use meshparity_judge::Losses;
use serde::Serialize;

/// Two loss curves as SVG polylines, and their per-step relative difference on a log axis of
/// its own (two curves a failing check tells apart often overlap to the pixel).
#[derive(Serialize)]
pub struct Plot {
    pub width: u32,
    pub height: u32,
    pub reference: String,
    pub candidate: String,
    pub y_min: String,
    pub y_max: String,
    pub steps: usize,
    /// |mesh − oracle| / |oracle| per step, log10-scaled into the difference panel.
    pub difference: String,
    pub diff_height: u32,
    pub diff_max: String,
    pub diff_min: String,
}

pub(crate) fn plot(losses: &Losses) -> Option<Plot> {
    let (r, c) = (losses.reference.clone(), losses.candidate.clone());
    if r.is_empty() {
        return None;
    }
    let (w, h, pad) = (480.0, 160.0, 24.0);
    let all = r.iter().chain(&c).copied().filter(|v| v.is_finite());
    let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let span = if hi > lo { hi - lo } else { 1.0 };
    let n = r.len().max(c.len()).max(2);
    let points = |s: &[f64]| {
        s.iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| {
                let x = pad + (w - 2.0 * pad) * i as f64 / (n - 1) as f64;
                let y = h - pad - (h - 2.0 * pad) * (v - lo) / span;
                format!("{x:.1},{y:.1}")
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (diff, dh) = difference(&r, &c, w, pad, n);
    Some(Plot {
        width: w as u32,
        height: h as u32,
        reference: points(&r),
        candidate: points(&c),
        y_min: format!("{lo:.6}"),
        y_max: format!("{hi:.6}"),
        steps: r.len(),
        difference: diff.points,
        diff_height: dh as u32,
        diff_max: diff.max,
        diff_min: diff.min,
    })
}

/// The difference panel's polyline and its axis labels.
struct Difference {
    points: String,
    max: String,
    min: String,
}

/// Per-step |c − r| / |r| on a log10 axis from the smallest nonzero to the largest reading
/// (zero sits on the floor), in a panel `w` wide.
fn difference(r: &[f64], c: &[f64], w: f64, pad: f64, n: usize) -> (Difference, f64) {
    let h = 90.0;
    let rel: Vec<f64> = r
        .iter()
        .zip(c)
        .map(|(a, b)| (b - a).abs() / a.abs().max(f64::MIN_POSITIVE))
        .collect();
    let nonzero = rel.iter().copied().filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = nonzero.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let (lo, hi) = if hi > 0.0 {
        (
            lo.log10().floor(),
            hi.log10().ceil().max(lo.log10().floor() + 1.0),
        )
    } else {
        (-17.0, -16.0)
    };
    let points = rel
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let x = pad + (w - 2.0 * pad) * i as f64 / (n - 1) as f64;
            let level = if *v > 0.0 && v.is_finite() {
                v.log10()
            } else {
                lo
            };
            let y = h - pad / 2.0 - (h - pad) * (level.min(hi) - lo) / (hi - lo);
            format!("{x:.1},{y:.1}")
        })
        .collect::<Vec<_>>()
        .join(" ");
    let label = |e: f64| format!("1e{e}");
    (
        Difference {
            points,
            max: label(hi),
            min: if rel.contains(&0.0) {
                format!("{} (and 0)", label(lo))
            } else {
                label(lo)
            },
        },
        h,
    )
}
