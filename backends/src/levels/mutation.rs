//! A correct mesh with one catalogued bug injected, judged by the levels that should catch it.
//! The job passes only if some level fails; the outcome says which did.

use std::path::Path;
use std::time::Instant;

use meshparity_specs::{Level, Limits, MeshConfig};
use serde::Serialize;

use super::check;
use super::outcome::Outcome;
use super::{io, LevelError, Setup};
use crate::parallel::Fault;

#[derive(Clone, Debug, Serialize)]
pub struct MutationOutcome {
    pub mutation: &'static str,
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

/// Run `mesh` with `fault` and judge it at every level in `levels` (roundtrip does not train,
/// so a training fault cannot show there and it is skipped).
pub fn mutation(
    setup: &Setup<'_>,
    mesh: &MeshConfig,
    fault: Fault,
    levels: &[(Level, Limits)],
    reference: &Path,
    out: &Path,
) -> Result<MutationOutcome, LevelError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    let start = Instant::now();
    let judged = check::levels(setup, mesh, Some(fault), levels, reference, out)?;
    let outcomes = judged.outcomes;
    let rec_altered = judged.altered;
    let caught_by: Vec<Level> = outcomes
        .iter()
        .filter(|o| !o.passed)
        .map(|o| o.level)
        .collect();
    Ok(MutationOutcome {
        mutation: fault.name(),
        caught: !caught_by.is_empty() && !rec_altered.is_empty(),
        caught_by,
        levels: outcomes,
        altered: rec_altered,
        seconds: start.elapsed().as_secs_f64(),
    })
}
