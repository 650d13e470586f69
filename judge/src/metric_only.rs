//! A failure in what the run reports, not in what it trains.
//!
//! A logger can be wrong while the training is right: Megatron-LM#4896 logged the MTP loss as an
//! unweighted mean of the ranks' own means (gradients unaffected, "only the logged value
//! drifts"), huggingface/transformers#35204 logged the sum of the accumulation steps' losses.
//! Such a bug fails the forward level on the reported loss alone. Naming it "the difference is
//! below what the trace resolves" would send a person to the model; the evidence says more: the
//! logits the loss is computed from pass their gate in the same comparison, and every traced
//! value of the training — activations, gradients, parameters — agrees with the reference. Then
//! the training is right and only the metric differs, and the localization says so.

use crate::cause::{Cause, Kind};
use crate::outcome::Outcome;
use crate::site::{Site, METRIC_PHASE};

/// The subjects of gates on reported metrics: what a run logs about itself, computed from the
/// training's values but not part of them.
const REPORTED: &[&str] = &["loss"];
/// The subject whose passing gate shows the values a reported loss is computed from agree.
const LOGITS: &str = "logits";
/// Where the reported loss is made (the engines' `loss.report` reduction).
pub const SITE: &str = "loss.report";

/// Where `o` failed only on a reported metric while the logits passed, and the trace compared
/// `traced` values without finding one diverged: the metric's site and the cause saying the
/// training is right. `None` otherwise (a gate on the training's own values failed too, no
/// logits were gated, or the trace compared nothing).
pub fn only_metric(o: &Outcome, traced: usize) -> Option<(Site, Cause)> {
    if traced == 0 || o.passed {
        return None;
    }
    let gates = || o.comparisons.iter().flat_map(|c| &c.gates);
    let over = |g: &&crate::gate::Gate| g.ratio > 1.0 || g.ratio.is_nan();
    let failed: Vec<_> = gates().filter(over).collect();
    if failed.is_empty()
        || !failed
            .iter()
            .all(|g| REPORTED.contains(&g.subject.as_str()))
    {
        return None;
    }
    // A comparison that failed without a gate over its limit (replicas that differ, a shard
    // that could not be merged) failed on something other than the metric.
    let unexplained = o
        .comparisons
        .iter()
        .any(|c| !c.passed && !c.gates.iter().any(|g| over(&g)));
    let logits: Vec<_> = gates().filter(|g| g.subject == LOGITS).collect();
    if unexplained || logits.is_empty() || logits.iter().any(over) {
        return None;
    }
    let worst = failed
        .iter()
        .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
        .expect("failed is not empty");
    let logits_ratio = logits.iter().map(|g| g.ratio).fold(0.0, f64::max);
    let site = Site {
        step: 0,
        replica: None,
        microbatch: None,
        phase: METRIC_PHASE.to_owned(),
        site: SITE.to_owned(),
        copy: None,
        what: format!(
            "the reported {}, the {} level's gate",
            worst.subject, o.level
        ),
        metric: worst.metric.clone(),
        value: worst.value,
        limit: worst.limit,
        bound: None,
    };
    let cause = Cause {
        kind: Kind::MetricOnly,
        axis: None,
        text: format!(
            "the training is right, only the reported metric differs: the logits it is \
             computed from pass their gate ({logits_ratio:.1e} of their limit) and no traced \
             value of the training diverged ({traced} values compared: activations, \
             gradients, parameters) — look at how the {} is computed or reduced for \
             logging, not at the model",
            worst.subject
        ),
        residual: 0.0,
    };
    Some((site, cause))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Gate;
    use crate::outcome::Comparison;
    use meshparity_specs::Level;

    fn forward(loss: f64, logits: f64) -> Outcome {
        let gate = |s: &str, v: f64| Gate::new(s.to_owned(), "relative_l2", v, 1e-5);
        let gates = vec![gate("logits", logits), gate("loss", loss)];
        let passed = gates.iter().all(|g| g.ratio <= 1.0);
        Outcome {
            level: Level::Forward,
            passed,
            comparisons: vec![Comparison {
                what: "logits and loss".to_owned(),
                reference: String::new(),
                candidate: String::new(),
                passed,
                compared: 2,
                failure: None,
                gates,
                reproduce: String::new(),
                report: serde_json::Value::Null,
                notes: Vec::new(),
                unkept: false,
            }],
            collectives: 1,
            altered: Vec::new(),
            anomalies: Vec::new(),
            losses: None,
            localization: None,
            localization_failed: None,
            repro: None,
            repro_in: None,
            seconds: 0.0,
        }
    }

    #[test]
    fn a_loss_off_with_the_logits_and_the_trace_right_is_a_metric_bug() {
        let (site, cause) = only_metric(&forward(0.7, 1e-7), 500).unwrap();
        assert_eq!(
            (site.site.as_str(), site.phase.as_str()),
            (SITE, METRIC_PHASE)
        );
        assert_eq!(cause.kind, Kind::MetricOnly);
        assert!(cause.text.contains("500 values compared"), "{}", cause.text);
    }

    #[test]
    fn logits_off_or_an_empty_trace_claim_nothing() {
        assert!(only_metric(&forward(0.7, 2e-5), 500).is_none());
        assert!(only_metric(&forward(0.7, 1e-7), 0).is_none());
        assert!(only_metric(&forward(1e-7, 1e-7), 500).is_none());
    }
}
