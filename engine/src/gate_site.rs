//! A failure the trace cannot resolve, placed by the level's own per-tensor gate.
//!
//! Localization compares traced values at a site limit set for activations. A bug whose
//! per-step effect is below what the trace resolves — a norm weight decayed by lr·wd ≈ 1e-4 of
//! itself when the run exempts it, which bf16 parameters round away — leaves every traced site
//! within that limit, while the oracle level's gate on each tensor's accumulated update still
//! fails on one tensor. That tensor is where the run left the reference, by the level's own
//! evidence: the localization names it as the gate's (`phase = "gate"`), never as a traced
//! site, and says the trace saw nothing there.

use crate::locate::{Localization, Site};
use crate::outcome::Outcome;

/// The phase of a site named by a level's gate.
pub const PHASE: &str = "gate";

/// Comparisons whose gates are per parameter tensor.
const PER_PARAMETER: [&str; 2] = ["updates", "weights"];

/// The parameter whose per-tensor gate in `o` is missed by the most (in units of its limit),
/// as a site `param.NAME`; `None` when no such gate failed (a curve, the logits, a layer
/// average, a shard merge).
pub fn gate_site(o: &Outcome) -> Option<Site> {
    let (c, g) = o
        .comparisons
        .iter()
        .filter(|c| !c.passed && PER_PARAMETER.contains(&c.what.as_str()))
        .flat_map(|c| c.gates.iter().map(move |g| (c, g)))
        .filter(|(_, g)| g.ratio > 1.0 && is_tensor(&g.subject))
        .max_by(|a, b| a.1.ratio.total_cmp(&b.1.ratio))?;
    Some(Site {
        step: 0,
        replica: None,
        microbatch: None,
        phase: PHASE.to_owned(),
        site: format!("param.{}", g.subject),
        copy: None,
        what: format!("the {} level's {} gate", o.level, c.what),
        metric: g.metric.clone(),
        value: g.value,
        limit: g.limit,
        bound: None,
    })
}

/// Whether a gate's subject names a tensor (not `layer N`, an average over a layer's tensors,
/// and not a rank-shard count).
fn is_tensor(subject: &str) -> bool {
    !subject.contains(' ')
}

impl Localization {
    /// Where no traced site diverged: the tensor `o`'s per-tensor gate names, if any.
    pub fn or_gate(mut self, o: Option<&Outcome>) -> Self {
        if self.first.is_none() {
            self.first = o.and_then(gate_site);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Gate;

    fn outcome(what: &str, gates: Vec<Gate>) -> Outcome {
        let comparison = serde_json::json!({
            "what": what, "reference": "a", "candidate": "b", "passed": false,
            "compared": gates.len(), "gates": gates,
        });
        serde_json::from_value(serde_json::json!({
            "level": "oracle", "passed": false, "comparisons": [comparison],
            "collectives": 0, "altered": [], "anomalies": [], "seconds": 0.0,
        }))
        .unwrap()
    }

    fn gate(subject: &str, value: f64, limit: f64) -> Gate {
        Gate::new(subject.to_owned(), "mean_abs_pct", value, limit)
    }

    /// The worst missed tensor of an update gate is named; a layer average, a passing gate or
    /// a comparison that is not per tensor names nothing.
    #[test]
    fn names_the_worst_missed_tensor_only() {
        let o = outcome(
            "updates",
            vec![
                gate("layer 3", 40.0, 12.0),
                gate("layers.0.attn_norm.weight", 12.5, 12.0),
                gate("norm.weight", 12.9, 12.0),
                gate("embed.weight", 1.0, 12.0),
            ],
        );
        let s = gate_site(&o).unwrap();
        assert_eq!(
            (s.site.as_str(), s.phase.as_str()),
            ("param.norm.weight", PHASE)
        );
        assert_eq!(s.what, "the oracle level's updates gate");
        assert!(gate_site(&outcome("updates", vec![gate("layer 3", 40.0, 12.0)])).is_none());
        assert!(gate_site(&outcome("losses", vec![gate("loss", 40.0, 12.0)])).is_none());
    }
}
