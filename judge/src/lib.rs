//! meshparity's judging: every level judged from a reference's and a mesh run's artifact
//! directories (what `meshparity-engine`'s contract says an engine writes), the gates and their
//! evidence, localization and its likely causes. The runner depends on it; no engine does.
//!
//! - [`check`] — one mesh run judged at all its levels; [`stages`] — a mutation's run judged in
//!   stages of growing length up to the first that catches it;
//! - [`judge`] — every level judged from a reference and a mesh run's artifact directories;
//!   [`error`] — why a level could not be judged;
//! - [`gate`], [`outcome`], [`mutation`] — what a level found, with the evidence, and a
//!   mutation's expected failure;
//! - [`finding`] — a job's findings, typed, as results files store them;
//! - [`routing`] — the routing level: per-token expert sets against the reference's;
//! - [`update`] — weight updates, what the oracle level compares;
//! - [`optimizer_step`] — a mesh's optimizer step replayed with world size 1's optimizer;
//! - [`derived`] — what a judge derives (updates, a resumed state's view), compared in memory;
//! - [`resumed`] — a resumed run's state against the uninterrupted run's; [`inputs`] — the rows
//!   each rank trained on against the reference's, step by step;
//! - [`vacuity`] — a level passes only against a reference that computes and trains;
//! - [`locate`] — the first traced site where a run leaves the reference ([`site`]: what it
//!   reports); [`bound`] — the error-analysis bound beside each site's limit; [`cause`] — the
//!   likely cause of a divergence, tested against the mesh; [`coupling`] — a gradient that only
//!   carries a global coupling's share of another's error; [`gate_site`] — a failure the trace
//!   cannot resolve, placed at the gate's worst tensor; [`metric_only`] — a failure only in a
//!   reported metric, the training right; [`sites`] — the trace level: every traced site of the
//!   first steps held to its own limit (its error-analysis bound times a calibrated factor);
//! - [`json`] — numbers as results files hold them (NaN and infinities written as `null`);
//! - [`repro`] — a shrunk reproduction of a failure; [`compare_line`] — the `meshparity compare`
//!   line every verdict carries;
//! - [`conformance`] — the suite every engine must pass; `testing` (unit tests only) — helpers the
//!   judge's unit tests share.

pub mod bound;
pub mod cause;
pub mod check;
pub mod compare_line;
pub mod conformance;
pub mod coupling;
pub mod derived;
pub mod error;
pub mod finding;
pub mod gate;
pub mod gate_site;
pub mod inputs;
pub mod json;
pub mod judge;
pub mod locate;
pub mod metric_only;
pub mod mutation;
pub mod optimizer_step;
pub mod outcome;
pub mod repro;
pub mod resumed;
pub mod routing;
pub mod site;
pub mod sites;
pub mod stages;
#[cfg(test)]
mod testing;
pub mod update;
pub mod vacuity;

pub use check::{check, checkpoint_site, localize, CheckError, Checked, ReferenceTrace};
pub use error::JudgeError;
pub use finding::Finding;
pub use gate::Gate;
pub use judge::Judge;
pub use locate::{locate, Localization};
pub use mutation::MutationOutcome;
pub use outcome::{Comparison, Losses, Outcome};
pub use repro::Repro;
pub use stages::{check_until_caught, check_until_caught_sharing, FirstStages};
