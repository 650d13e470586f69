//! meshparity's result model and the reports rendered from it.
//!
//! - `model.rs` — what a run found, as versioned JSON (`results.json`): run metadata and every
//!   planned job with its status, attempts, timings and the evidence of its checks.
//! - `write.rs` — atomic writes, so a reader never sees half a report.
//!
//! The runner builds a [`RunResults`]; every report format is a pure function of it, so
//! `meshparity report results.json` can re-render any of them later.

pub mod model;
pub mod write;

pub use model::{Attempt, JobRecord, RunMeta, RunResults, Status, FORMAT_VERSION};
