//! meshparity's runner crate: the planner (a validated spec expanded into a DAG of jobs, with
//! the filters and partitions CI uses to run a slice of it), the executor that runs the jobs as
//! isolated worker processes, and the worker itself.
//!
//! - `calibrate/` — seeds × configurations in this process: headroom and margin of the gates;
//! - `engines.rs` — the engines the binary hands in (the runner links none);
//! - `plan/` — spec → job DAG, selection;
//! - `exec/` — scheduling, processes, result store, progress;
//! - `worker.rs` — one job in this process, the unit a process (or cluster node) runs;
//! - `testing.rs` — fault injection for the runner's own tests, compiled only with the
//!   `test-faults` feature (the workspace's dev-dependencies turn it on; a build users run never
//!   has it);
//! - [`shrink`] — `run --shrink`: the smallest configuration that still fails the same level.

pub mod calibrate;
pub mod engines;
pub mod exec;
pub mod plan;
pub mod shrink;
#[cfg(feature = "test-faults")]
pub mod testing;
pub mod worker;

pub use engines::{Engines, Target};
pub use plan::{Filter, Job, JobId, JobKind, Partition, Plan, Role, Selection};
