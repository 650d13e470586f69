//! meshparity's result model and the reports rendered from it.
//!
//! - `model.rs` — what a run found, as versioned JSON (`results.json`): run metadata and every
//!   planned job with its status, attempts, timings and the evidence of its checks;
//! - `junit.rs` — JUnit XML for CI;
//! - `view.rs`, `plot.rs`, `divergence.rs`, `html.rs`, `templates/` — the self-contained HTML
//!   report (`plot.rs`: a curve level's loss curves and their difference);
//! - `calibration/` — what a calibration sweep measured, as text, HTML and JSON;
//! - `markdown.rs` — a summary for CI step summaries and PR comments;
//! - `merge.rs` — shards' results merged into one run;
//! - `write.rs` — atomic writes, so a reader never sees half a report;
//! - `chars.rs` — characters XML and HTML cannot carry, replaced;
//! - [`mutations`] — what caught each mutation, per injected bug;
//! - [`notes`] — the run's notes: what comparisons left out or could not decide;
//! - [`performance`] — performance figures side by side, never gated;
//! - [`sites`] — the trace level's worst sites, each error beside its bound.
//!
//! The runner builds a [`RunResults`]; every report format is a pure function of it, so
//! `meshparity report results.json` can re-render any of them later.

pub mod calibration;
mod chars;
mod divergence;
pub mod html;
pub mod junit;
pub mod markdown;
pub mod merge;
pub mod model;
pub mod mutations;
pub mod notes;
pub mod performance;
mod plot;
pub mod sites;
pub mod view;
pub mod write;

pub use model::{Attempt, JobRecord, RunMeta, RunResults, Status, FORMAT_VERSION};

/// The report files a run writes next to `results.json`.
pub mod files {
    pub const RESULTS: &str = "results.json";
    pub const JUNIT: &str = "junit.xml";
    pub const HTML: &str = "report.html";
    pub const MARKDOWN: &str = "summary.md";
}

/// A byte count for people: `812 B`, `4.2 kB`, `18.0 GB` (powers of 1000, as `du --si`).
pub fn size(bytes: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < units.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

/// Write every format into `dir` (atomically, each file). `results.json` is compact: a big
/// run's (798 jobs of examples/packing.toml) was 110 MB indented and is 43 MB so (`jq .
/// results.json` indents it for reading).
pub fn write_all(results: &RunResults, dir: &std::path::Path) -> std::io::Result<()> {
    let json = serde_json::to_vec(results).expect("results serialize");
    write::atomic(&dir.join(files::RESULTS), &json)?;
    write::atomic(&dir.join(files::JUNIT), junit::junit(results).as_bytes())?;
    write::atomic(&dir.join(files::HTML), html::html(results).as_bytes())?;
    write::atomic(
        &dir.join(files::MARKDOWN),
        markdown::markdown(results, files::HTML).as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_du_si_prints_them() {
        assert_eq!(super::size(812), "812 B");
        assert_eq!(super::size(4_200), "4.2 kB");
        assert_eq!(super::size(18_000_000_000), "18.0 GB");
    }
}
