//! Failure localization: the first traced site where a run leaves the reference.
//!
//! An engine that can trace writes `trace.safetensors` (one tensor per site value, already
//! canonicalized to world size 1) and `trace.json` (the values in the order the run computed
//! them, and which reference value each is compared with). [`locate`] walks the run's values in
//! that order and reports the first whose relative L2 to the reference exceeds the limit for
//! the dtype, with the microbatch whose rows diverge first. Nothing here knows how the values
//! were computed, so a command engine's per-module traces are localized the same way.

use std::collections::HashMap;

use indexmap::IndexMap;
use std::path::Path;

use meshparity_compare::metrics::TensorMetrics;
use meshparity_compare::scan::scan;
use meshparity_specs::tolerance::{builtin_gate, GRAD_NORM};
use meshparity_specs::DType;
use serde::{Deserialize, Serialize};

use crate::cause::{self, Axes, Cause};
use meshparity_engine::tensor::HostTensor;

mod naming;

pub use crate::site::{Site, SiteRow, GATE_PHASE};
use meshparity_engine::trace::read_trace;
pub use meshparity_engine::trace::{write_trace, TraceEntry, TraceError, TraceIndex};
pub use naming::step_and_path;
use naming::{path_of, site};

/// The relative-L2 limit past which a traced value has left the reference: far above the
/// round-off of re-associated sums in the dtype, below what a catalogued bug does at the site
/// where it acts. Measured on the quickstart meshes (tests/localize.rs): correct runs reach
/// 1.0e-6 in f32 and 3.8e-2 in bf16 (small gradients, where bf16 cancellation is large); the
/// weakest catalogued bug gives 1.7e-3 in f32 at its site, ~0.1 in bf16 (at 0.15 it is found
/// one site late). So f32 localizes with 100× to spare; bf16 with 1.6× on either side.
pub fn limit(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-9,
        DType::F32 => 1e-4,
        DType::F16 => 2e-2,
        DType::Bf16 => 6e-2,
    }
}

/// A parameter as a step computes with it (`param.*`) differs from the reference's by the
/// round-off of the updates before it, below an activation's: a parameter one update stale (an
/// unshard that did not happen) is a few percent off in bf16, under the activations' limit, so
/// bf16's is a tenth of theirs (6e-3; a correct TP mesh's bf16 embedding after one step was
/// measured above 6e-4, its f32 master weights' round-off flipping bf16 roundings). In f32 a
/// tenth was too tight: AdamW's first update divides each gradient by its own magnitude, and a
/// gradient near zero keeps only its round-off, so correct meshes' parameters after one step
/// measured up to 3.8e-5 (240 runs: 30 seeds × cp2, dp2·tp2·sp·cp2, dp2, tp2·sp, packed rows
/// with and without padded documents), over 1e-5. One stale update is still percents off there.
pub fn param_limit(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => limit(dtype),
        _ => limit(dtype) * 0.1,
    }
}

/// Whether a trace key (`s{step}.{site}`) is a parameter's.
fn is_param(like: &str) -> bool {
    like.split_once('.')
        .is_some_and(|(_, site)| site.starts_with("param."))
}

/// The words a summary gives a localization that failed: its first line, cut to a length a
/// summary line can carry (the whole error is in the job's stderr.log).
pub fn failed_note(why: &str) -> String {
    let first = why
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let cut: String = first.chars().take(300).collect();
    let more = if cut.len() < first.len() { "…" } else { "" };
    format!("localization failed: {cut}{more} (the job's stderr.log has the whole error)")
}

/// The localization of one failed check or caught mutation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Localization {
    /// The first diverging site; `None` when every traced value stayed within the limit.
    pub first: Option<Site>,
    /// Values compared (up to and including the first divergence).
    pub compared: usize,
    /// Every compared value, in order.
    pub sites: Vec<SiteRow>,
    /// The relative L2 above which a traced tensor counted as diverged (localization's own
    /// site limit, per dtype: not the level's gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_limit: Option<f64>,
    /// What the first diverging value's difference is, tested against the mesh
    /// ([`crate::cause`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// Where the first gradient over the limit only carried a global coupling's share of
    /// another's error ([`crate::coupling`]), in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coupling: Option<String>,
    /// Sites the run's program left out of its trace, each `site: why` (a command engine's
    /// `!NAME: why` lines): said where nothing diverged, so a reader knows what was not looked
    /// at.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
}

impl Localization {
    /// A localization a level's own comparison places at `first` (a checkpoint entry, the
    /// inputs), having compared `compared` values: no trace walked, no cause tested.
    pub fn placed(first: Site, compared: u64) -> Self {
        Localization {
            first: Some(first),
            compared: compared as usize,
            sites: Vec::new(),
            site_limit: None,
            cause: None,
            coupling: None,
            left_out: Vec::new(),
        }
    }

    /// `; N sites left out by the program (the first: SITE: why)`, or nothing.
    fn left_out_note(&self) -> String {
        match self.left_out.first() {
            None => String::new(),
            Some(first) => format!(
                "; {} site(s) left out by the program, the first {first}",
                self.left_out.len()
            ),
        }
    }

    /// One line for reports.
    pub fn summary(&self) -> String {
        let Some(s) = &self.first else {
            let limit = self
                .site_limit
                .map(|l| format!(" beyond localization's site limit (relative L2 {l:e})"))
                .unwrap_or_default();
            return format!(
                "no traced site diverged{limit} ({} values compared{}): the level's own limit \
                 is tighter than that, or the difference arises outside the traced steps",
                self.compared,
                self.left_out_note()
            );
        };
        let mut at = format!("step {}", s.step);
        if let (Some(r), Some(m)) = (s.replica, s.microbatch) {
            at += &format!(", microbatch {m} (replica {r})");
        }
        if s.phase == crate::site::METRIC_PHASE {
            let cause = self.cause.as_ref().map(|c| c.summary()).unwrap_or_default();
            return format!(
                "first divergence: {} ({}: {} {:.3e} > {:e}); {cause}",
                s.site,
                s.what,
                s.metric.replace('_', " "),
                s.value,
                s.limit
            );
        }
        if s.phase == "checkpoint" {
            return format!("first divergence: checkpoint save/load: {}", s.what);
        }
        if s.phase == crate::site::INPUTS_PHASE {
            return format!(
                "first divergence: the inputs, before any computation: {}",
                s.what
            );
        }
        if s.phase == GATE_PHASE {
            let limit = self
                .site_limit
                .map(|l| format!(" beyond relative L2 {l:e}"))
                .unwrap_or_default();
            let over = self.site_limit.and_then(|l| {
                self.sites
                    .iter()
                    .find(|r| r.relative_l2 > l || r.relative_l2.is_nan())
            });
            if let Some(row) = over {
                return format!(
                    "first divergence: {} ({}: {} {:.3e} > {:e}); the trace's first site over \
                     its limit, {} (relative L2 {:.1e}), is its consequence or the model's \
                     noise: the difference starts below what the trace resolves",
                    s.site, s.what, s.metric, s.value, s.limit, row.key, row.relative_l2
                );
            }
            return format!(
                "first divergence: {} ({}: {} {:.3e} > {:e}); no traced site diverged{limit} \
                 ({} values compared): the difference is below what the trace resolves",
                s.site, s.what, s.metric, s.value, s.limit, self.compared
            );
        }
        let copy = s.copy.map(|c| format!(", copy {c}")).unwrap_or_default();
        let mut cause = self
            .coupling
            .as_ref()
            .map(|c| format!("; {c}"))
            .unwrap_or_default();
        cause += &self
            .cause
            .as_ref()
            .map(|c| format!("; {}", c.summary()))
            .unwrap_or_default();
        let bound = s
            .bound
            .map(|b| format!(" (error-analysis bound {b:.1e})"))
            .unwrap_or_default();
        format!(
            "first divergence: {at}, {}, {} ({}{copy}), {} {:.1e} > {:e}{bound}{cause}",
            s.phase,
            s.site,
            s.what,
            s.metric.replace('_', " "),
            s.value,
            s.limit
        )
    }
}

/// Compare the run's trace in `run` with the reference's in `reference`, and test the first
/// diverging value against the hypotheses of [`crate::cause`] for a run on `axes`.
pub fn locate(
    reference: &Path,
    run: &Path,
    dtype: DType,
    axes: &Axes,
) -> Result<Localization, TraceError> {
    let (_, want) = read_trace(reference)?;
    let (index, got) = read_trace(run)?;
    let layers = crate::bound::layers_of(index.entries.iter().map(|e| e.key.as_str()));
    let mut sites = Vec::new();
    let mut readings = Readings::default();
    for e in &index.entries {
        let Some((r, c, value)) = readings.read(e, &want, &got) else {
            continue;
        };
        // The gradient norm is one number summed over every gradient: its round-off is far
        // below a tensor's, so it has its own limit (the oracle level's gate on it).
        let limit = if e.like.ends_with(GRAD_NORM) && !index.program {
            builtin_gate(dtype).grad_norm
        } else if is_param(&e.like) {
            param_limit(dtype)
        } else {
            limit(dtype)
        };
        sites.push(SiteRow {
            key: e.key.clone(),
            relative_l2: value,
            bound: Some(crate::bound::at(path_of(&e.key), layers, dtype)),
        });
        if value > limit || value.is_nan() {
            if r.shape != c.shape {
                // Tensors that cannot line up: no value-level cause is fitted to them (a shard
                // written as whole read as "the reference's value at step 1").
                return Ok(mismatched(
                    e,
                    index.microbatches,
                    (r, c),
                    limit,
                    sites,
                    dtype,
                ));
            }
            let mut first = site(e, index.microbatches, None, value, limit);
            // A gradient first over the limit may only carry a global coupling's share of
            // another's error: the source is the first one a common factor does not explain.
            let coupled = (first.phase == "gradients" && e.like.contains(".grad."))
                .then(|| crate::coupling::source(&index.entries, &want, &got, first.step, limit))
                .flatten();
            let (e, value) = match &coupled {
                Some(c) => (&index.entries[c.source], c.value),
                None => (e, value),
            };
            let (r, c) = (&want[&e.like], &got[&e.key]);
            let block = first_block(r, c, e.blocks, limit);
            first = site(e, index.microbatches, block, value, limit);
            first.bound = Some(crate::bound::at(path_of(&e.key), layers, dtype));
            let cause = cause::gather(&index, &want, &got, e, &first, limit)
                .map(|ev| cause::diagnose(&ev, axes));
            return Ok(Localization {
                first: Some(first),
                compared: sites.len(),
                sites,
                site_limit: Some(self::limit(dtype)),
                cause,
                left_out: left_out(&index),
                coupling: coupled.map(|c| {
                    format!(
                        "{} other gradient(s) differ only by one common factor ({:.4}): a global \
                         coupling (the clip coefficient, a loss normalizer) spreads this \
                         gradient's error into every gradient",
                        c.explained, c.factor
                    )
                }),
            });
        }
    }
    Ok(Localization {
        first: None,
        compared: sites.len(),
        sites,
        site_limit: Some(self::limit(dtype)),
        cause: None,
        coupling: None,
        left_out: left_out(&index),
    })
}

/// The index's sites left out, each `site: why`.
fn left_out(index: &meshparity_engine::TraceIndex) -> Vec<String> {
    index
        .left_out
        .iter()
        .map(|l| format!("`{}`: {}", l.site, l.why))
        .collect()
}

/// Every compared value of the trace in `run` against the reference's in `reference`, in the
/// run's order, each with its error-analysis bound: what the trace level gates site by site.
pub fn compared(reference: &Path, run: &Path, dtype: DType) -> Result<Vec<SiteRow>, TraceError> {
    let (_, want) = read_trace(reference)?;
    let (index, got) = read_trace(run)?;
    let layers = crate::bound::layers_of(index.entries.iter().map(|e| e.key.as_str()));
    let mut readings = Readings::default();
    Ok(index
        .entries
        .iter()
        .filter_map(|e| {
            let (_, _, value) = readings.read(e, &want, &got)?;
            Some(SiteRow {
                key: e.key.clone(),
                relative_l2: value,
                bound: Some(crate::bound::at(path_of(&e.key), layers, dtype)),
            })
        })
        .collect())
}

/// A trace's values as they are compared, entry by entry.
#[derive(Default)]
struct Readings<'t> {
    /// Each step's first copy of the gradient norm: every rank's must equal it to the bit.
    norm_copy: HashMap<&'t str, &'t HostTensor>,
}

impl<'t> Readings<'t> {
    /// The reference's and the run's values of `e` and their relative L2; `None` where `e` is
    /// not compared (a part, `{site}%`, evidence for a likely cause) or either side lacks it.
    fn read(
        &mut self,
        e: &'t TraceEntry,
        want: &'t IndexMap<String, HostTensor>,
        got: &'t IndexMap<String, HostTensor>,
    ) -> Option<(&'t HostTensor, &'t HostTensor, f64)> {
        if e.like.ends_with('%') {
            return None;
        }
        let (r, c) = (want.get(&e.like)?, got.get(&e.key)?);
        let mut value = relative_l2(r, c);
        if e.like.ends_with(GRAD_NORM) {
            // Copies of one all-reduced norm that differ: ranks clip by different norms, a
            // bug whatever its size (a rank summing its own shards only).
            let first = *self.norm_copy.entry(&e.like).or_insert(c);
            if first.bytes != c.bytes {
                value = f64::INFINITY;
            }
        }
        Some((r, c, value))
    }
}

/// The localization of a first diverging site whose shapes differ: said as a shape mismatch with
/// its usual cause, no hypothesis fitted.
fn mismatched(
    e: &TraceEntry,
    microbatches: usize,
    (r, c): (&HostTensor, &HostTensor),
    limit: f64,
    sites: Vec<SiteRow>,
    dtype: DType,
) -> Localization {
    let mut first = site(e, microbatches, None, f64::INFINITY, limit);
    first.what = format!(
        "shape {:?} where the reference's is {:?}{}",
        c.shape,
        r.shape,
        meshparity_compare::align::shape_hint(&r.shape, &c.shape)
            .map(|h| format!(": {h}"))
            .unwrap_or_default()
    );
    Localization {
        first: Some(first),
        compared: sites.len(),
        sites,
        site_limit: Some(self::limit(dtype)),
        cause: None,
        coupling: None,
        left_out: Vec::new(),
    }
}

/// Relative L2 of `c` to `r`; infinite when they cannot be compared (shape, dtype) or the
/// candidate has non-finite values the reference lacks.
fn relative_l2(r: &HostTensor, c: &HostTensor) -> f64 {
    if r.shape != c.shape || r.dtype != c.dtype || r.bytes.len() != c.bytes.len() {
        return f64::INFINITY;
    }
    let s = scan(r.dtype, &r.bytes, &c.bytes, 0, 0.0, 0.0);
    if s.nonfinite_cand > s.nonfinite_ref {
        return f64::INFINITY;
    }
    TensorMetrics::from_stats(&s, &r.shape, 0.0, 0.0).relative_l2
}

/// The first row block of a stacked value that exceeds the limit.
fn first_block(r: &HostTensor, c: &HostTensor, blocks: usize, limit: f64) -> Option<usize> {
    if blocks < 2 || r.shape != c.shape || r.shape.first()? % blocks != 0 {
        return None;
    }
    let parts = |t: &HostTensor| t.split(0, blocks);
    let (rs, cs) = (parts(r), parts(c));
    (0..blocks).find(|&b| relative_l2(&rs[b], &cs[b]) > limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Infinite readings (shape mismatch, checkpoint) survive results.json.
    #[test]
    fn localizations_survive_json() {
        let l = Localization {
            first: Some(Site {
                step: 0,
                replica: Some(1),
                microbatch: Some(0),
                phase: "checkpoint".into(),
                site: "checkpoint".into(),
                copy: None,
                what: "shapes differ".into(),
                metric: "roundtrip".into(),
                value: f64::INFINITY,
                limit: 0.0,
                bound: None,
            }),
            compared: 3,
            sites: vec![SiteRow {
                key: "s0.x".into(),
                relative_l2: f64::INFINITY,
                bound: Some(1e-6),
            }],
            site_limit: Some(1e-4),
            cause: None,
            coupling: None,
            left_out: vec!["`moe.experts`: rows sorted by expert".into()],
        };
        let back: Localization = serde_json::from_str(&serde_json::to_string(&l).unwrap()).unwrap();
        assert_eq!(back, l);
    }

    /// Where nothing diverged, the sites the program left out are said with the first's reason.
    #[test]
    fn nothing_diverged_names_what_was_left_out() {
        let mut l = Localization {
            first: None,
            compared: 7,
            sites: Vec::new(),
            site_limit: None,
            cause: None,
            coupling: None,
            left_out: Vec::new(),
        };
        assert!(!l.summary().contains("left out"), "{}", l.summary());
        l.left_out = vec![
            "`layers.0.moe.experts`: the experts' rows, sorted by expert".into(),
            "`layers.1.moe.experts`: the experts' rows, sorted by expert".into(),
        ];
        assert!(
            l.summary().contains(
                "(7 values compared; 2 site(s) left out by the program, the first \
                 `layers.0.moe.experts`: the experts' rows, sorted by expert)"
            ),
            "{}",
            l.summary()
        );
    }
}
