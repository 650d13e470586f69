//! What a job found, typed: the one result type the worker writes, the runner stores and the
//! reports read (results.json's `detail`). Reports never look a field up by string.

use serde::{Deserialize, Deserializer, Serialize};

use crate::mutation::MutationOutcome;
use crate::outcome::{Comparison, Outcome};

/// A job's findings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Finding {
    /// A level judged on a mesh.
    Level(Outcome),
    /// A mutation job: every level's outcome on the mutated run.
    Mutation(MutationOutcome),
    /// An engine run (reference or a mesh's training): where its artifacts are.
    Artifacts(Artifacts),
}

/// Where an engine run's artifacts went, and what the run did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Artifacts {
    pub artifacts: String,
    #[serde(default)]
    pub collectives: usize,
    /// The run's peak activations held for backward, where the engine measures it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_bytes: Option<u64>,
}

impl Finding {
    /// Every comparison, of the level or of every level of a mutation.
    pub fn comparisons(&self) -> Vec<&Comparison> {
        match self {
            Finding::Level(o) => o.comparisons.iter().collect(),
            Finding::Mutation(m) => m.levels.iter().flat_map(|o| &o.comparisons).collect(),
            Finding::Artifacts(_) => Vec::new(),
        }
    }

    /// The comparisons a report points a person at, whose files a run keeps: every failed one,
    /// and every one of a mutation that went uncaught (its passing comparisons are the evidence
    /// that the check missed it) — but those whose files were not kept
    /// ([`Comparison::unkept`]: a caught mutation keeps one failed comparison's).
    pub fn cited(&self) -> Vec<&Comparison> {
        let missed = matches!(self, Finding::Mutation(m) if !m.caught);
        self.comparisons()
            .into_iter()
            .filter(|c| (missed || !c.passed) && !c.unkept)
            .collect()
    }

    /// Every comparison, mutable (a worker marks those whose files it does not keep).
    pub fn comparisons_mut(&mut self) -> Vec<&mut Comparison> {
        match self {
            Finding::Level(o) => o.comparisons.iter_mut().collect(),
            Finding::Mutation(m) => m
                .levels
                .iter_mut()
                .flat_map(|o| &mut o.comparisons)
                .collect(),
            Finding::Artifacts(_) => Vec::new(),
        }
    }

    /// The level outcomes, one for a level job, every level's for a mutation job.
    pub fn outcomes(&self) -> Vec<&Outcome> {
        match self {
            Finding::Level(o) => vec![o],
            Finding::Mutation(m) => m.levels.iter().collect(),
            Finding::Artifacts(_) => Vec::new(),
        }
    }

    /// Collective calls of the run judged (the level's, or the run that wrote the artifacts).
    pub fn collectives(&self) -> Option<usize> {
        match self {
            Finding::Level(o) => Some(o.collectives),
            Finding::Mutation(m) => m.levels.first().map(|o| o.collectives),
            Finding::Artifacts(a) => Some(a.collectives),
        }
    }

    /// Peak bytes of activations a step of the run held for backward (the run that wrote the
    /// artifacts, where its engine measures it).
    pub fn activation_bytes(&self) -> Option<u64> {
        match self {
            Finding::Artifacts(a) => a.activation_bytes,
            _ => None,
        }
    }

    pub fn mutation(&self) -> Option<&MutationOutcome> {
        match self {
            Finding::Mutation(m) => Some(m),
            _ => None,
        }
    }

    /// Where the judged run first left the reference, if it was localized.
    pub fn localization(&self) -> Option<&crate::locate::Localization> {
        match self {
            Finding::Level(o) => o.localization.as_ref(),
            Finding::Mutation(m) => m.localization.as_ref(),
            Finding::Artifacts(_) => None,
        }
    }

    /// Tolerant reading for results files: a detail this build cannot read (another version's)
    /// is dropped rather than failing the whole file.
    pub fn lenient<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Finding>, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(serde_json::from_value(v).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Gate;
    use crate::outcome::Losses;
    use meshparity_specs::Level;

    /// What the worker writes, the runner stores and the reports read back: the same value,
    /// infinite ratios (structural failures) and diverged losses included.
    #[test]
    fn findings_survive_results_json() {
        let gate = Gate::new("2 rank shards".into(), "replicas_differ", 1.0, 0.0);
        assert!(gate.ratio.is_infinite());
        let outcome = Outcome {
            level: Level::Oracle,
            passed: false,
            comparisons: vec![Comparison {
                what: "updates".into(),
                reference: "a".into(),
                candidate: "b".into(),
                passed: false,
                compared: 2,
                failure: Some("merging".into()),
                gates: vec![gate],
                reproduce: String::new(),
                report: serde_json::Value::Null,
                notes: Vec::new(),
                unkept: false,
            }],
            collectives: 7,
            altered: vec!["site: skipped".into()],
            anomalies: Vec::new(),
            losses: Some(Losses {
                reference: vec![1.0, 2.0],
                candidate: vec![1.0, f64::NAN],
            }),
            localization: None,
            localization_failed: None,
            repro: None,
            repro_in: None,
            seconds: 0.5,
        };
        let json = serde_json::to_string(&Finding::Level(outcome)).unwrap();
        let back: Finding = serde_json::from_str(&json).unwrap();
        let Finding::Level(o) = &back else {
            panic!("read back as another kind: {json}")
        };
        assert!(o.comparisons[0].gates[0].failed());
        assert!(o.losses.as_ref().unwrap().candidate[1].is_nan());
        assert_eq!(back.collectives(), Some(7));
        let artifacts: Finding =
            serde_json::from_str(r#"{"artifacts": "/tmp/x", "collectives": 3}"#).unwrap();
        assert!(matches!(artifacts, Finding::Artifacts(_)));
    }
}
