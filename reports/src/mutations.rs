//! What caught each mutation: per injected bug, how many of its jobs were caught, by which
//! level first, and how many were localized where the bug is injected. One row per mutation
//! however many meshes and seeds ran it, so a release sweep's summary stays short.

use indexmap::IndexMap;
use meshparity_judge::Finding;

use crate::model::RunResults;

/// One mutation over its jobs.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct MutationRow {
    pub mutation: String,
    pub jobs: usize,
    pub caught: usize,
    /// The level that failed first (in level order) on each caught job, with its count.
    pub first_caught_by: IndexMap<String, usize>,
    /// Jobs localized where the catalog injects the bug, and elsewhere (`None` on both: no
    /// catalog site, a command engine's mutation).
    pub as_injected: usize,
    pub elsewhere: usize,
}

/// Every mutation of the run, in the order first run.
pub fn rows(results: &RunResults) -> Vec<MutationRow> {
    let mut out: IndexMap<&str, MutationRow> = IndexMap::new();
    for job in &results.jobs {
        let Some(Finding::Mutation(m)) = job.detail.as_ref() else {
            continue;
        };
        let row = out.entry(&m.mutation).or_insert_with(|| MutationRow {
            mutation: m.mutation.clone(),
            ..MutationRow::default()
        });
        row.jobs += 1;
        if m.caught {
            row.caught += 1;
            if let Some(level) = m.caught_by.first() {
                *row.first_caught_by.entry(level.to_string()).or_default() += 1;
            }
        }
        match m.localized_as_injected {
            Some(true) => row.as_injected += 1,
            Some(false) => row.elsewhere += 1,
            None => {}
        }
    }
    out.into_values().collect()
}
