//! The run's notes: what comparisons left out or could not decide (a metric a program logs
//! that is neither gated nor a performance figure, a metric only one side logs), each said
//! once with the jobs it concerns. A note never changes a verdict; it keeps what was not
//! checked from passing silently.

use crate::model::RunResults;

/// One distinct note and the jobs whose comparisons made it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Note {
    pub text: String,
    /// How many jobs made it.
    pub jobs: usize,
    /// The first of them, and its anchor in the HTML report.
    pub first_job: String,
    pub anchor: String,
}

/// Every distinct note of every job's comparisons, in the order first made.
pub fn notes(results: &RunResults) -> Vec<Note> {
    let mut out: indexmap::IndexMap<&str, Note> = indexmap::IndexMap::new();
    for job in &results.jobs {
        let Some(d) = job.detail.as_ref() else {
            continue;
        };
        let mut seen: Vec<&str> = Vec::new();
        for c in d.comparisons() {
            for text in &c.notes {
                if seen.contains(&text.as_str()) {
                    continue;
                }
                seen.push(text);
                out.entry(text)
                    .and_modify(|n| n.jobs += 1)
                    .or_insert_with(|| Note {
                        text: text.clone(),
                        jobs: 1,
                        first_job: job.name.clone(),
                        anchor: crate::model::anchor(job),
                    });
            }
        }
    }
    out.into_values().collect()
}
