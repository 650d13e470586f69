//! A correct mesh with one catalogued bug injected, judged by the levels that should catch it.
//! The job passes only if some level fails; the outcome says which did.

use meshparity_specs::Level;
use serde::{Deserialize, Serialize};

use crate::artifact::Manifest;
use crate::outcome::Outcome;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MutationOutcome {
    pub mutation: String,
    /// Whether some level failed, as it must.
    pub caught: bool,
    /// Levels that failed.
    pub caught_by: Vec<Level>,
    /// Every level's findings on the mutated run.
    pub levels: Vec<Outcome>,
    /// Sites the fault altered (evidence that it was injected at all).
    pub altered: Vec<String>,
    pub seconds: f64,
}

impl MutationOutcome {
    pub fn summary(&self) -> String {
        if self.altered.is_empty() {
            return format!(
                "`{}` was never injected: no site of this mesh matched",
                self.mutation
            );
        }
        match self.caught_by.first() {
            Some(level) => {
                let why = self
                    .levels
                    .iter()
                    .find(|o| o.level == *level)
                    .map(Outcome::summary)
                    .unwrap_or_default();
                format!(
                    "caught by {}: {why}",
                    self.caught_by
                        .iter()
                        .map(|l| l.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            None => format!(
                "NOT caught: every level passed with `{}` injected",
                self.mutation
            ),
        }
    }
}

impl MutationOutcome {
    /// The verdict on a run with `mutation` injected, from its manifest and its levels'
    /// outcomes: caught when some level failed *and* the mutation altered something (a bug
    /// that never fired proves nothing, whatever the levels say).
    pub fn judged(mutation: &str, run: &Manifest, levels: Vec<Outcome>, seconds: f64) -> Self {
        let caught_by: Vec<Level> = levels
            .iter()
            .filter(|o| !o.passed)
            .map(|o| o.level)
            .collect();
        Self {
            mutation: mutation.to_owned(),
            caught: !caught_by.is_empty() && !run.altered.is_empty(),
            caught_by,
            levels,
            altered: run.altered.clone(),
            seconds,
        }
    }
}
