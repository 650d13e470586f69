//! meshparity's runner crate: the planner (a validated spec expanded into a DAG of jobs, with
//! the filters and partitions CI uses to run a slice of it), the executor that runs the jobs as
//! isolated worker processes, and the worker itself.
//!
//! - `calibrate/` — seeds × configurations in this process: headroom and margin of the gates;
//! - `engines.rs` — the engines the binary hands in (the runner links none);
//! - `plan/` — spec → job DAG, selection;
//! - `exec/` — scheduling, processes, result store, progress;
//! - `fingerprint.rs` — what a record was judged under (the build, the spec's part of a job),
//!   which `--resume` and the worker's cache keys hold it to;
//! - `worker/` — one job in this process, the unit a process (or cluster node) runs; its
//!   `faults.rs` is fault injection for the runner's own tests, compiled only with the
//!   `test-faults` feature (the workspace's dev-dependencies turn it on; a build users run never
//!   has it);
//! - [`shrink`] — `run --shrink`: the smallest configuration that still fails the same level.

pub mod calibrate;
pub mod engines;
pub mod exec;
pub mod fingerprint;
pub mod plan;
pub mod shrink;
pub mod worker;

pub use engines::{Engines, OpenError, Target};
pub use plan::{Filter, Job, JobId, JobKind, Partition, Plan, Role, Selection};
