//! The trace level: every traced site of the first steps held to its own limit, the site's
//! error-analysis bound ([`crate::bound`]) times a calibrated factor per class of site.
//!
//! The forward and oracle levels gate aggregates sized for the whole model's round-off (in
//! bf16 a relative L2 of 7e-2 on the logits, 12 % on layer-averaged updates), so a bug that
//! moves one site to 2–3× its own expected round-off passes them: under
//! `moe-capacity-local-tokens` on ep2·etp2 localization found `layers.0.mlp.combine.fwd.in` at
//! relative L2 6.4e-2 beside a bound of 3.2e-2, and no level failed. TTrace (arXiv
//! 2506.09280) gates each traced tensor by its own bound instead; this is that gate, with the
//! factor measured on this engine (docs/verdicts.md, "The per-site gate").
//!
//! The first step's sites only. Both runs start that step from the same bits (the seed
//! checkpoint, the same batch), so a site's difference is the round-off of computing it, which
//! is what the bound bounds. From the second step on, the parameters differ by the first
//! update's round-off, which AdamW amplifies element by element (it divides each gradient by
//! its own RMS, so a near-zero gradient's round-off moves that weight by up to `lr`): measured
//! on the quickstart (50 seeds, bf16, AdamW lr 1e-2), the second step's gradients reached 3.8×
//! their bound on correct meshes and f16's 12×, while the first step's stayed near 1×. What the
//! update does is the oracle level's to judge (its update gates and the f32 replay).
//!
//! One gate per class (the class's worst site, named): pass or fail is the same as one gate
//! per site, and a run's results stay small. The five sites nearest their limits are listed in
//! the comparison's report (`sites`), each error beside its bound, which the HTML report shows.

use std::path::Path;

use meshparity_engine::artifact::files;
use meshparity_specs::{DType, Limits, TRACE_RATIOS};

use crate::gate::Gate;
use crate::locate::{compared, step_and_path, SiteRow};
use crate::outcome::Comparison;

/// The comparison's name, and its gates' scope.
pub const WHAT: &str = "traced sites";

/// The step whose sites are judged (see the module doc for why the first only).
const JUDGED_STEP: usize = 0;

/// How many of the worst sites the comparison lists, bound beside observed error.
const LISTED: usize = 5;

/// The class of a trace key's site, as the name of its limit ([`TRACE_RATIOS`]): a parameter
/// as a step computes with it (its round-off is its updates'), the loss's backward seed, a
/// value of the backward or the optimizer, or an activation of the forward.
pub fn class_of(key: &str) -> &'static str {
    let (_, path) = step_and_path(key);
    if path.starts_with("param.") {
        TRACE_RATIOS[2]
    } else if is_loss_seed(path) {
        TRACE_RATIOS[3]
    } else if crate::bound::is_backward(path) {
        TRACE_RATIOS[1]
    } else {
        TRACE_RATIOS[0]
    }
}

/// Whether a site is the loss's backward seed: the gradient the loss sends the target logits
/// (−1/N per counted token) and label smoothing's share (−ε/(V·N)), the model's head's or the
/// MTP layer's. The backward's bound at its start allows 4ε, which matrix products earn;
/// these are one or two roundings of 1/N, so a normalizer wrong by a few percent (a per-rank
/// or per-microbatch mean, a CP scale) is many times their own round-off while well inside
/// the bound: their own class, their own factor.
fn is_loss_seed(path: &str) -> bool {
    let head = path.strip_prefix("mtp.").unwrap_or(path);
    matches!(head, "loss.target.bwd.in" | "loss.smooth.bwd.in")
}

/// A site's relative L2 in units of its bound (infinite where it could not be compared).
fn ratio(row: &SiteRow) -> f64 {
    match row.bound {
        Some(b) if b > 0.0 => row.relative_l2 / b,
        _ => f64::INFINITY,
    }
}

/// Why the trace level found nothing to judge.
#[derive(Debug, thiserror::Error)]
pub enum SitesError {
    #[error(transparent)]
    Trace(#[from] meshparity_engine::TraceError),
    #[error("the two traces have no site of the first step in common ({reference} and {run})")]
    Empty { reference: String, run: String },
}

/// Judge the run's trace in `run` against the reference's in `reference` under `limits`.
pub fn judge(
    reference: &Path,
    run: &Path,
    dtype: DType,
    limits: &Limits,
) -> Result<Comparison, SitesError> {
    let mut rows = compared(reference, run, dtype)?;
    rows.retain(|r| step_and_path(&r.key).0 == JUDGED_STEP);
    if rows.is_empty() {
        return Err(SitesError::Empty {
            reference: reference.display().to_string(),
            run: run.display().to_string(),
        });
    }
    let mut gates = Vec::new();
    let mut notes = Vec::new();
    for class in TRACE_RATIOS {
        let of_class = || rows.iter().filter(move |r| class_of(&r.key) == class);
        let Some(worst) = of_class().max_by(|a, b| ratio(a).total_cmp(&ratio(b))) else {
            continue;
        };
        match limits.metrics.get(class) {
            Some(&factor) => gates.push(Gate {
                scope: WHAT.to_owned(),
                ..Gate::new(worst.key.clone(), class, ratio(worst), factor)
            }),
            None => notes.push(format!(
                "{} {class} sites not gated: the tolerance table sets no `{class}`",
                of_class().count()
            )),
        }
    }
    // Nearest its own limit first (a failing site heads the list); an ungated class last.
    let to_limit = |r: &SiteRow| match limits.metrics.get(class_of(&r.key)) {
        Some(&factor) => ratio(r) / factor,
        None => 0.0,
    };
    let mut ranked: Vec<&SiteRow> = rows.iter().collect();
    ranked.sort_by(|a, b| to_limit(b).total_cmp(&to_limit(a)));
    let listed: Vec<Listed> = ranked
        .iter()
        .take(LISTED)
        .map(|r| listed(r, limits))
        .collect();
    let failure = gates.iter().find(|g| g.failed()).map(|g| {
        let row = rows
            .iter()
            .find(|r| r.key == g.subject)
            .expect("a gate's site");
        format!(
            "{}: relative L2 {:.2e} against its error-analysis bound {:.2e}, {:.2}× it (limit \
             {}×)",
            row.key,
            row.relative_l2,
            row.bound.unwrap_or(f64::NAN),
            ratio(row),
            g.limit
        )
    });
    Ok(Comparison {
        what: WHAT.to_owned(),
        reference: reference.join(files::TRACE).display().to_string(),
        candidate: run.join(files::TRACE).display().to_string(),
        passed: failure.is_none(),
        compared: rows.len() as u64,
        failure,
        gates,
        reproduce: String::new(),
        report: serde_json::json!({ "sites": listed }),
        notes,
        unkept: false,
    })
}

/// One of the worst sites as the report lists it: its error and its bound side by side.
#[derive(Debug, serde::Serialize)]
struct Listed {
    site: String,
    class: &'static str,
    relative_l2: f64,
    bound: Option<f64>,
    /// `relative_l2 / bound`.
    ratio: f64,
    /// The class's factor; `None` where the table sets none (not gated).
    limit: Option<f64>,
}

fn listed(row: &SiteRow, limits: &Limits) -> Listed {
    let class = class_of(&row.key);
    Listed {
        site: row.key.clone(),
        class,
        relative_l2: row.relative_l2,
        bound: row.bound,
        ratio: ratio(row),
        limit: limits.metrics.get(class).copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indexmap::IndexMap;
    use meshparity_compare::TensorDtype;
    use meshparity_engine::tensor::HostTensor;
    use meshparity_engine::trace::{write_trace, TraceEntry, TraceIndex};

    fn tensor(xs: &[f64]) -> HostTensor {
        HostTensor {
            dtype: TensorDtype::F64,
            shape: vec![xs.len()],
            bytes: xs.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// A two-layer model's trace in `dir`: an activation of layer 0 (bound 3.2e-2 in bf16)
    /// and a gradient, the activation's last element moved by `off`.
    fn traced(dir: &Path, off: f64) {
        let keys = [
            "s0.layers.0.mlp.combine.fwd.in",
            "s0.grad.layers.1.mlp.down.weight.dp",
        ];
        std::fs::create_dir_all(dir).unwrap();
        let mut index = TraceIndex::default();
        let mut tensors = IndexMap::new();
        for (i, key) in keys.iter().enumerate() {
            let like = (*key).to_owned();
            index.entries.push(TraceEntry {
                key: like.clone(),
                like: like.clone(),
                blocks: 0,
                over: Vec::new(),
            });
            let last = if i == 0 { 1.0 + off } else { 1.0 };
            tensors.insert(like, tensor(&[1.0, 1.0, 1.0, last]));
        }
        write_trace(dir, &index, &tensors).unwrap();
    }

    /// A site at 1.8× its own bound fails the gate though it is within localization's site
    /// limit (6e-2 in bf16); at half its bound it passes; every class found gated reports its
    /// worst site beside its bound.
    #[test]
    fn a_site_past_its_own_bound_fails_though_within_the_site_limit() {
        let root = tempfile::tempdir().unwrap();
        let (reference, run) = (root.path().join("a"), root.path().join("b"));
        traced(&reference, 0.0);
        let mut limits = Limits::default();
        limits
            .metrics
            .extend([("forward_ratio", 1.5), ("backward_ratio", 1.5)]);
        let bound = crate::bound::at("layers.0.mlp.combine.fwd.in", 2, DType::Bf16);
        // relative L2 of one element moved by `off` among four ones: off / 2.
        for (ratio, passes) in [(1.8, false), (0.5, true)] {
            traced(&run, 2.0 * ratio * bound);
            let c = judge(&reference, &run, DType::Bf16, &limits).unwrap();
            assert_eq!(c.passed, passes, "{c:?}");
            assert_eq!(c.compared, 2);
            let fwd = c
                .gates
                .iter()
                .find(|g| g.metric == "forward_ratio")
                .unwrap();
            assert!((fwd.value - ratio).abs() < 1e-6, "{fwd:?}");
            assert!(2.0 * ratio * bound / 2.0 < crate::locate::limit(DType::Bf16));
            // The worst first, its error beside its bound.
            let first = &c.report["sites"][0];
            assert_eq!(first["site"], "s0.layers.0.mlp.combine.fwd.in");
            assert!((first["bound"].as_f64().unwrap() - bound).abs() < 1e-12);
            assert!((first["ratio"].as_f64().unwrap() - ratio).abs() < 1e-6);
            assert!(c.notes.is_empty(), "{:?}", c.notes);
        }
        // No limit in force: nothing gated, which the judge refuses as a pass.
        let ungated = judge(&reference, &run, DType::Bf16, &Limits::default()).unwrap();
        assert!(ungated.gates.is_empty() && ungated.notes[0].contains("not gated"));
    }

    #[test]
    fn sites_fall_in_the_class_their_round_off_comes_from() {
        assert_eq!(class_of("s0.layers.0.mlp.combine.fwd.in"), "forward_ratio");
        assert_eq!(class_of("s1.layers.1.attn.o.bwd.out@1"), "backward_ratio");
        assert_eq!(class_of("s0.grad.embed.weight.dp"), "backward_ratio");
        assert_eq!(class_of("s1.adam.norm.weight.m"), "backward_ratio");
        assert_eq!(class_of("s1.lr"), "backward_ratio");
        assert_eq!(class_of("s1.param.norm.weight"), "parameter_ratio");
        assert_eq!(class_of("s0.loss.target.bwd.in@1"), "seed_ratio");
        assert_eq!(class_of("s0.mtp.loss.smooth.bwd.in"), "seed_ratio");
        assert_eq!(class_of("s0.loss.sumexp.bwd.in"), "backward_ratio");
        assert_eq!(class_of("s0.loss.target.fwd.in"), "forward_ratio");
    }
}
