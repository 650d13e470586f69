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
use crate::optimizer_step as replay;
use crate::outcome::{Comparison, Outcome};

pub use crate::site::GATE_PHASE as PHASE;

/// Comparisons whose gates are per parameter tensor (the optimizer step's also per moment,
/// named by the parameter they belong to).
const PER_PARAMETER: [&str; 3] = ["updates", "weights", replay::WHAT];

/// The parameter whose per-tensor gate in `o` is missed by the most (in units of its limit),
/// as a site `param.NAME` (a moment of the optimizer step's: `adam.NAME.m` or `.v`, as the
/// trace names moments); `None` when no such gate failed (a curve, the logits, a layer
/// average, a shard merge).
pub fn gate_site(o: &Outcome) -> Option<Site> {
    worst(o, &PER_PARAMETER).map(|(s, _)| s)
}

/// The tensor the optimizer step's replay misses by the most, as [`gate_site`] names it, and
/// the replay's comparison.
fn replay_site(o: &Outcome) -> Option<(Site, &Comparison)> {
    worst(o, &[replay::WHAT])
}

fn worst<'o>(o: &'o Outcome, comparisons: &[&str]) -> Option<(Site, &'o Comparison)> {
    let (c, g) = o
        .comparisons
        .iter()
        .filter(|c| !c.passed && comparisons.contains(&c.what.as_str()))
        .flat_map(|c| c.gates.iter().map(move |g| (c, g)))
        .filter(|(_, g)| g.ratio > 1.0 && is_tensor(&g.subject))
        .max_by(|a, b| a.1.ratio.total_cmp(&b.1.ratio))?;
    let site = if c.what == replay::WHAT {
        replay::site_of(&g.subject)
    } else {
        format!("param.{}", g.subject)
    };
    let site = Site {
        step: 0,
        replica: None,
        microbatch: None,
        phase: PHASE.to_owned(),
        site,
        copy: None,
        what: format!("the {} level's {} gate", o.level, c.what),
        metric: g.metric.clone(),
        value: g.value,
        limit: g.limit,
        bound: None,
    };
    Some((site, c))
}

/// Whether a gate's subject names a tensor (not `layer N`, an average over a layer's tensors,
/// and not a rank-shard count).
fn is_tensor(subject: &str) -> bool {
    !subject.contains(' ')
}

impl Localization {
    /// Where no traced site diverged: the tensor `o`'s per-tensor gate names, if any. Where
    /// one did but `o`'s optimizer step replay explains it better, see [`Self::or_replay`].
    pub fn or_gate(mut self, o: Option<&Outcome>) -> Self {
        if self.first.is_none() {
            if let Some((site, cause)) =
                o.and_then(|o| crate::metric_only::only_metric(o, self.compared))
            {
                self.first = Some(site);
                self.cause = Some(cause);
                return self;
            }
            self.first = o.and_then(gate_site);
        }
        self.or_replay(o)
    }

    /// Where a traced site diverged but an optimizer step replay among `outcomes` explains it
    /// better ([`Self::replay_explains`]): the tensor the replay finds wrongly updated. Any
    /// level's replay will do, not only the catching level's: a mutation run judged at several
    /// levels at once may name another first.
    pub fn or_replay<'o>(mut self, outcomes: impl IntoIterator<Item = &'o Outcome>) -> Self {
        let Some(first) = &self.first else {
            return self;
        };
        if first.phase == PHASE {
            return self;
        }
        let replayed = outcomes.into_iter().find_map(replay_site);
        if let Some((r, _)) = replayed.filter(|(r, c)| self.replay_explains(first, r, c)) {
            self.first = Some(r);
            self.cause = None;
            self.coupling = None;
        }
        self
    }

    /// Whether the replay's site `r` (from its comparison `c`) is where the run left the
    /// reference rather than the trace's `first`, a step after the first update: `first` is a
    /// parameter whose own update the replay found right (its difference came in with its
    /// inputs: bf16 gradients' round-off, which AdamW's normalization makes whole updates of)
    /// or that a moment the replay found wrong moves, or a value computed from parameters the trace had compared within its limit, among them
    /// the one the replay finds wrongly updated (a wrongly decayed f32 norm weight is 5e-5 of
    /// itself off, under the trace's parameter limit, and the activations after it over theirs).
    /// A traced optimizer site (`lr`, `adam.*`) is already where the step went wrong, and stays.
    fn replay_explains(&self, first: &Site, r: &Site, c: &Comparison) -> bool {
        let optimizer = first.site == "lr" || first.site.starts_with("adam.");
        if optimizer || first.step == 0 || first.site == r.site {
            return false;
        }
        if let Some(x) = first.site.strip_prefix("param.") {
            // A wrong moment comes before every parameter it moves.
            let moment = r.site.starts_with("adam.");
            return moment || c.gates.iter().any(|g| g.subject == x && !g.failed());
        }
        let param = format!("param.{}", replay::param_of_site(&r.site));
        self.sites.iter().any(|row| {
            let (step, path) = crate::locate::step_and_path(&row.key);
            (1..=first.step).contains(&step) && path == param
        })
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

    fn localized_at(first: &str, step: usize, rows: &[&str]) -> Localization {
        let mut at = crate::check::checkpoint_site(&outcome("checkpoint", vec![])).unwrap();
        let site = at.first.as_mut().unwrap();
        (site.step, site.site, site.phase) = (step, first.to_owned(), "forward".to_owned());
        // Within the limit but the last, the first divergence.
        at.sites = rows
            .iter()
            .enumerate()
            .map(|(i, k)| crate::locate::SiteRow {
                key: (*k).to_owned(),
                relative_l2: if i + 1 == rows.len() { 1e-3 } else { 1e-5 },
                bound: None,
            })
            .collect();
        (at.compared, at.site_limit) = (rows.len(), Some(1e-4));
        at
    }

    /// An activation over its limit a step after the trace compared a parameter the replay
    /// finds wrongly updated is that parameter's consequence; a traced optimizer site, or a
    /// parameter the trace never compared before it, keeps the trace's site.
    #[test]
    fn the_replay_names_a_wrong_update_the_trace_saw_only_downstream() {
        let replay = outcome(
            crate::optimizer_step::WHAT,
            vec![
                gate("norm.weight", 838.0, 8.0),
                gate("embed.weight", 0.5, 8.0),
            ],
        );
        let rows = [
            "s0.param.norm.weight",
            "s1.param.norm.weight",
            "s1.layers.0.mlp.down.fwd.in",
        ];
        let l = localized_at("layers.0.mlp.down.fwd.in", 1, &rows).or_gate(Some(&replay));
        let first = l.first.as_ref().unwrap();
        assert_eq!(
            (first.site.as_str(), first.phase.as_str()),
            ("param.norm.weight", PHASE)
        );
        assert!(
            l.summary().contains("is its consequence"),
            "{}",
            l.summary()
        );
        let lr = localized_at("lr", 1, &rows).or_gate(Some(&replay));
        assert_eq!(lr.first.unwrap().site, "lr");
        let unseen = localized_at("layers.0.mlp.down.fwd.in", 1, &rows[..1]).or_gate(Some(&replay));
        assert_eq!(unseen.first.unwrap().site, "layers.0.mlp.down.fwd.in");
        // A parameter the trace found off whose own update the replay found right: its
        // inputs' noise; the replay's wrong moment is named as the trace names moments.
        let moment = outcome(
            crate::optimizer_step::WHAT,
            vec![
                gate("optim.exp_avg.norm.weight", 9e6, 8.0),
                gate("embed.weight", 0.5, 8.0),
            ],
        );
        let noisy = localized_at("param.embed.weight", 1, &rows[..1]).or_gate(Some(&moment));
        assert_eq!(noisy.first.unwrap().site, "adam.norm.weight.m");
        let step0 = localized_at("param.embed.weight", 0, &rows[..1]).or_gate(Some(&moment));
        assert_eq!(step0.first.unwrap().site, "param.embed.weight");
    }
}
