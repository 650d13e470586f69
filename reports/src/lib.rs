//! meshparity's result model and the reports rendered from it.
//!
//! - `model.rs` — what a run found, as versioned JSON (`results.json`): run metadata and every
//!   planned job with its status, attempts, timings and the evidence of its checks;
//! - `junit.rs` — JUnit XML for CI;
//! - `view.rs`, `html.rs`, `templates/` — the self-contained HTML report;
//! - `calibration/` — what a calibration sweep measured, as text, HTML and JSON;
//! - `markdown.rs` — a summary for CI step summaries and PR comments;
//! - `merge.rs` — shards' results merged into one run;
//! - `write.rs` — atomic writes, so a reader never sees half a report;
//! - `chars.rs` — characters XML and HTML cannot carry, replaced.
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
pub mod performance;
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

/// Write every format into `dir` (atomically, each file).
pub fn write_all(results: &RunResults, dir: &std::path::Path) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(results).expect("results serialize");
    write::atomic(&dir.join(files::RESULTS), &json)?;
    write::atomic(&dir.join(files::JUNIT), junit::junit(results).as_bytes())?;
    write::atomic(&dir.join(files::HTML), html::html(results).as_bytes())?;
    write::atomic(
        &dir.join(files::MARKDOWN),
        markdown::markdown(results, files::HTML).as_bytes(),
    )
}
