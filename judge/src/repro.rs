//! A failing job's smallest reproduction, as its report carries it (the runner's shrink finds
//! it: `meshparity run --shrink`).

use meshparity_specs::Level;
use serde::{Deserialize, Serialize};

/// The smallest failing configuration a job's report carries.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Repro {
    /// `tp2, 1 layer, hidden 16, …`.
    pub smallest: String,
    pub level: Level,
    /// The spec that reproduces it, and the command that runs it.
    pub spec: String,
    pub command: String,
    /// Configurations tried and the shrinking steps that still failed.
    pub tried: usize,
    pub steps: usize,
    /// Seconds the search took, and one run of the smallest case.
    pub seconds: f64,
    pub run_seconds: f64,
}

impl Repro {
    pub fn summary(&self) -> String {
        format!(
            "smallest failing: {}, {} ({:.2} s); repro: {}",
            self.smallest, self.level, self.run_seconds, self.command
        )
    }
}

/// `; <the repro's summary>`, `; repro: in job NAME` when another job holds it, or nothing.
pub fn note(repro: Option<&Repro>, elsewhere: Option<&str>) -> String {
    match (repro, elsewhere) {
        (Some(r), _) => format!("; {}", r.summary()),
        (None, Some(job)) => format!("; repro: in job {job}"),
        (None, None) => String::new(),
    }
}
