//! A correct mesh with one catalogued bug injected, judged by the levels that should catch it.
//! The job passes only if some level fails; the outcome says which did.

use meshparity_specs::Level;
use serde::{Deserialize, Serialize};

use crate::locate::Localization;
use crate::outcome::Outcome;
use meshparity_engine::artifact::Manifest;

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
    /// Where the mutated run first left the reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localization: Option<Localization>,
    /// Why localizing the caught mutation failed, where it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localization_failed: Option<String>,
    /// Whether that is where the catalog says the bug is injected (`None`: no catalog site, or
    /// not localized).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localized_as_injected: Option<bool>,
    /// The smallest configuration that is still caught the same way (`run --shrink`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repro: Option<crate::Repro>,
    /// The job that shrank this kind of failure, where another did (`run` shrinks the first
    /// caught job of each mutation unless `--shrink` asks for every one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repro_in: Option<String>,
    pub seconds: f64,
}

impl MutationOutcome {
    pub fn summary(&self) -> String {
        let repro = crate::repro::note(self.repro.as_ref(), self.repro_in.as_deref());
        match (&self.localization, &self.localization_failed) {
            (Some(l), _) => format!("{}; {}{repro}", self.verdict(), l.summary()),
            (None, Some(why)) => format!(
                "{}; {}{repro}",
                self.verdict(),
                crate::locate::failed_note(why)
            ),
            (None, None) => format!("{}{repro}", self.verdict()),
        }
    }

    /// Record where the run was localized, and whether that is where `engine` says it injects
    /// the bug, else the catalog's site (a command engine's bug may share a catalogued bug's
    /// name but not its site names). Where no traced site diverged, the catching level's
    /// per-tensor gate names the tensor ([`crate::gate_site`]).
    pub fn localized(&mut self, l: Localization, engine: &dyn meshparity_engine::Engine) {
        let caught = self.caught_by.first();
        let l = l
            .or_gate(self.levels.iter().find(|o| Some(&o.level) == caught))
            .or_replay(&self.levels);
        self.localized_as_injected = l.first.as_ref().and_then(|s| {
            engine.injected_at(&self.mutation, &s.site).or_else(|| {
                meshparity_specs::catalog::find(&self.mutation).map(|m| m.site_matches(&s.site))
            })
        });
        self.localization = Some(l);
    }

    fn verdict(&self) -> String {
        if self.altered.is_empty() {
            return format!(
                "`{}` was never injected: no site of this mesh matched",
                self.mutation
            );
        }
        match self.caught_by.first() {
            Some(level) => {
                let first = self.levels.iter().find(|o| o.level == *level);
                let why = first.map(Outcome::summary).unwrap_or_default() + &self.kept_line(first);
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

    /// Where the caught level's first failure lost its compare line (a caught mutation keeps
    /// one failed comparison's files, the smallest: runner's `keep`), the line of the one kept,
    /// so a summary never cites files that are gone and still says how to re-derive the catch.
    fn kept_line(&self, first: Option<&Outcome>) -> String {
        let shown = first.and_then(|o| o.comparisons.iter().find(|c| !c.passed));
        if !shown.is_some_and(|c| c.unkept) {
            return String::new();
        }
        let kept = self.levels.iter().find_map(|o| {
            let c = o
                .comparisons
                .iter()
                .find(|c| !c.passed && !c.reproduce.is_empty())?;
            Some((o.level, c))
        });
        match kept {
            Some((level, c)) => format!(
                " (reproduce, by {} {}: {})",
                level.as_str(),
                c.what,
                c.reproduce
            ),
            None => String::new(),
        }
    }
}

impl MutationOutcome {
    /// The verdict on a run with `mutation` injected, from its manifest and its levels'
    /// outcomes: caught when some level failed *and* the mutation altered something (a bug
    /// that never fired proves nothing, whatever the levels say).
    pub fn judged(mutation: &str, run: &Manifest, levels: Vec<Outcome>, seconds: f64) -> Self {
        // A level that fails only as vacuous (a dead reference) says nothing about the bug.
        let caught_by: Vec<Level> = levels
            .iter()
            .filter(|o| !o.passed && !o.only_vacuous())
            .map(|o| o.level)
            .collect();
        Self {
            mutation: mutation.to_owned(),
            caught: !caught_by.is_empty() && !run.altered.is_empty(),
            caught_by,
            levels,
            altered: run.altered.clone(),
            localization: None,
            localization_failed: None,
            localized_as_injected: None,
            repro: None,
            repro_in: None,
            seconds,
        }
    }
}
