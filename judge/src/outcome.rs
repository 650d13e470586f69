//! What one level found on one mesh, with the evidence behind it.

use meshparity_compare::render::sci;
use meshparity_compare::report::{CurveReport, TensorReport, Verdict};
use meshparity_specs::{Level, Training};
use serde::{Deserialize, Serialize};

use crate::gate::{self, Gate};
use crate::optimizer_step::{self as replay, Replayed};

/// The metric a vacuous level fails on ([`crate::vacuity`]); a mutation is never caught by it.
pub const VACUOUS: &str = "vacuous";

/// One comparison's verdict and what it compared.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Comparison {
    /// `logits+loss`, `losses`, `gradients`, `weights`, `checkpoint`.
    pub what: String,
    pub reference: String,
    pub candidate: String,
    pub passed: bool,
    /// Tensors or curve points compared.
    pub compared: u64,
    /// The first thing over its limit, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Every limit in force with the value held against it; none means nothing was gated,
    /// which a level treats as an error rather than a pass.
    pub gates: Vec<Gate>,
    /// The `meshparity compare` command that re-derives this verdict from the two files.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reproduce: String,
    /// The comparison engine's full report.
    #[serde(default)]
    pub report: serde_json::Value,
    /// What the comparison left out or could not decide, in words (a metric the program logged
    /// that is neither gated nor a performance figure): said in the reports, never dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Its files were not kept: a caught mutation keeps one failed comparison's files, the
    /// smallest that re-derives the catch (`runner/src/worker/keep.rs`). Its numbers stay;
    /// its `reproduce` is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unkept: bool,
}

impl Comparison {
    /// Whether this is the comparison of a vacuous level.
    pub fn is_vacuous(&self) -> bool {
        self.gates.iter().any(|g| g.metric == VACUOUS)
    }

    /// The optimizer step replayed ([`crate::optimizer_step`]) from the run's file `file`:
    /// one gate per weight and moment, the worst one over its limit named.
    pub fn replayed(training: &Training, file: &str, r: &Replayed) -> Self {
        let gates: Vec<Gate> = r
            .readings
            .iter()
            .map(|(subject, value)| Gate {
                scope: replay::WHAT.to_owned(),
                ..Gate::new(subject.clone(), replay::METRIC, *value, replay::LIMIT)
            })
            .collect();
        let failure = gates
            .iter()
            .filter(|g| g.failed())
            .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
            .map(|g| {
                format!(
                    "`{}` after update {} is {} units of round-off (limit {}) from world size \
                     1's {} applied to the run's own gradients and state: the optimizer's step, \
                     not the model, differs",
                    g.subject,
                    r.step,
                    sci(g.value),
                    sci(g.limit),
                    replay::kind(training)
                )
            });
        Self {
            what: replay::WHAT.to_owned(),
            reference: format!("world size 1's {} replayed", replay::kind(training)),
            candidate: file.to_owned(),
            passed: failure.is_none(),
            compared: gates.len() as u64,
            failure,
            gates,
            reproduce: String::new(),
            report: serde_json::Value::Null,
            notes: Vec::new(),
            unkept: false,
        }
    }

    pub fn tensors(what: &str, r: &TensorReport) -> Self {
        let failure = r
            .problems
            .first()
            .map(|p| p.message.clone())
            .or_else(|| {
                r.layers.iter().find_map(|l| {
                    l.failures.first().map(|f| {
                        format!(
                            "layer {} mean {} {} (limit {} {})",
                            l.layer,
                            f.metric,
                            sci(f.value),
                            f.bound,
                            sci(f.limit)
                        )
                    })
                })
            })
            .or_else(|| {
                r.tensors.iter().find_map(|t| {
                    t.failures.first().map(|f| {
                        if f.metric == "allclose" {
                            format!(
                                "`{}`: {} of {} element(s) outside allclose (atol {}, rtol {})",
                                t.name,
                                f.value,
                                t.metrics.elements,
                                sci(t.limits.atol),
                                sci(t.limits.rtol)
                            )
                        } else {
                            format!(
                                "`{}` {} {} (limit {} {})",
                                t.name,
                                f.metric,
                                sci(f.value),
                                f.bound,
                                sci(f.limit)
                            )
                        }
                    })
                })
            });
        Self {
            what: what.to_owned(),
            reference: r.reference.clone(),
            candidate: r.candidate.clone(),
            passed: r.verdict != Verdict::Mismatch,
            compared: r.counts.tensors_compared as u64,
            failure: if r.verdict == Verdict::Mismatch {
                failure.or(Some("mismatch".into()))
            } else {
                None
            },
            gates: scoped(what, gate::of_tensors(r)),
            reproduce: String::new(),
            report: serde_json::to_value(r).unwrap_or_default(),
            notes: Vec::new(),
            unkept: false,
        }
    }

    pub fn curve(r: &CurveReport) -> Self {
        let failure = r.problems.first().map(|p| p.message.clone()).or_else(|| {
            r.metrics
                .iter()
                .find(|m| m.verdict == Verdict::Mismatch)
                .map(|m| {
                    let step = m
                        .worst_step
                        .map(|s| format!(" at step {s}"))
                        .unwrap_or_default();
                    let limit = |k: &str| r.limits.metrics.get(k).copied();
                    let over = meshparity_compare::curve::rel_limit(&r.limits, &m.name)
                        .map(|l| format!(" > {}", sci(l)))
                        .unwrap_or_default();
                    let allowed = limit("allowed_failing_steps").unwrap_or(0.0);
                    format!(
                        "`{}` rel {}{over}{step}; {} failing step(s), {allowed} allowed",
                        m.name,
                        sci(m.worst_rel),
                        m.failing_steps.len()
                    )
                })
        });
        Self {
            what: "losses".to_owned(),
            reference: r.reference.clone(),
            candidate: r.candidate.clone(),
            passed: r.verdict != Verdict::Mismatch,
            compared: r.counts.points_compared as u64,
            failure: if r.verdict == Verdict::Mismatch {
                failure.or(Some("mismatch".into()))
            } else {
                None
            },
            gates: scoped("losses", gate::of_curve(r)),
            reproduce: String::new(),
            report: serde_json::to_value(r).unwrap_or_default(),
            notes: r.notes.clone(),
            unkept: false,
        }
    }
}

fn scoped(what: &str, mut gates: Vec<Gate>) -> Vec<Gate> {
    for g in &mut gates {
        g.scope = what.to_owned();
    }
    gates
}

/// What a level found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub level: Level,
    pub passed: bool,
    pub comparisons: Vec<Comparison>,
    /// Collective calls the mesh run made (0 for roundtrip).
    pub collectives: usize,
    /// Calls a fault altered, as `site: what happened`.
    pub altered: Vec<String>,
    /// Receives with no matching send and the like.
    pub anomalies: Vec<String>,
    /// Per-step losses of both runs (curve level), for plots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub losses: Option<Losses>,
    /// Where a failed check's run first left the reference ([`crate::locate`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localization: Option<crate::locate::Localization>,
    /// Why localizing the failure failed (a traced rerun that crashed): the verdict stands,
    /// and the reports say there is no localization and why, instead of nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localization_failed: Option<String>,
    /// The smallest configuration that still fails this level (`run --shrink`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repro: Option<crate::Repro>,
    /// The job that shrank this kind of failure, where another did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repro_in: Option<String>,
    pub seconds: f64,
}

/// The two loss curves a curve level compared.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Losses {
    #[serde(deserialize_with = "crate::json::numbers_or_nan")]
    pub reference: Vec<f64>,
    #[serde(deserialize_with = "crate::json::numbers_or_nan")]
    pub candidate: Vec<f64>,
}

impl Outcome {
    /// Whether every failed comparison failed as vacuous (and one did): the reference does not
    /// train, and nothing else is wrong.
    pub fn only_vacuous(&self) -> bool {
        let mut failed = self.comparisons.iter().filter(|c| !c.passed).peekable();
        failed.peek().is_some() && failed.all(Comparison::is_vacuous)
    }

    /// One line for people: what passed or the first failure.
    pub fn summary(&self) -> String {
        match self.comparisons.iter().find(|c| !c.passed) {
            Some(c) if c.is_vacuous() => c.failure.clone().unwrap_or_else(|| "vacuous".to_owned()),
            Some(c) => {
                let again = if c.reproduce.is_empty() {
                    String::new()
                } else {
                    format!(" (reproduce: {})", c.reproduce)
                };
                let mut at = match (&self.localization, &self.localization_failed) {
                    (Some(l), _) => format!("; {}", l.summary()),
                    (None, Some(why)) => format!("; {}", crate::locate::failed_note(why)),
                    (None, None) => String::new(),
                };
                at += &crate::repro::note(self.repro.as_ref(), self.repro_in.as_deref());
                // `checkpoint differs`, `losses differ`, `logits and loss differ`.
                let verb = if c.what.ends_with('s') || c.what.contains(" and ") {
                    "differ"
                } else {
                    "differs"
                };
                format!(
                    "{} {verb}: {}{again}{at}",
                    c.what,
                    c.failure.as_deref().unwrap_or("mismatch")
                )
            }
            None => {
                let n: u64 = self.comparisons.iter().map(|c| c.compared).sum();
                let what: Vec<&str> = self.comparisons.iter().map(|c| c.what.as_str()).collect();
                let closest = match self.closest() {
                    Some(g) => format!("; closest: {}", g.describe()),
                    None => String::new(),
                };
                format!("{} match ({n} compared{closest})", what.join(", "))
            }
        }
    }

    /// The gate of any comparison that came closest to its limit (or furthest past it).
    pub fn closest(&self) -> Option<&Gate> {
        gate::closest(self.comparisons.iter().flat_map(|c| &c.gates))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each reading is a gate at the replay's limit; the worst one over it is named, with the
    /// update and the optimizer.
    #[test]
    fn a_replayed_step_names_its_worst_tensor_over_the_limit() {
        let training = crate::testing::training(meshparity_specs::Optimizer::Adamw, None);
        let r = Replayed {
            step: 2,
            readings: vec![
                ("embed.weight".into(), 0.5),
                ("norm.weight".into(), 840.0),
                ("optim.exp_avg.norm.weight".into(), 9.0),
            ],
        };
        let c = Comparison::replayed(&training, "optimizer-step.safetensors", &r);
        assert!(!c.passed);
        assert_eq!(c.compared, 3);
        assert!(c.gates.iter().all(|g| g.scope == replay::WHAT));
        let why = c.failure.unwrap();
        assert!(
            why.starts_with("`norm.weight` after update 2 is 8.4"),
            "{why}"
        );
        assert!(why.contains("AdamW"), "{why}");
        let ok = Replayed {
            step: 2,
            readings: vec![("embed.weight".into(), 0.5)],
        };
        assert!(Comparison::replayed(&training, "f", &ok).passed);
    }
}
