//! The planner: spec → job DAG.
//!
//! Files:
//! - `job.rs` — what one job is, and its stable id (a content hash of its identity);
//! - `job_file.rs` — one job and its dependencies as a file, what a worker starts from;
//! - `build.rs` — matrix cells → reference, level and mutation jobs, and their edges;
//! - `filter.rs`, `partition.rs` — `--filter` and `--partition`;
//! - `select.rs` — filter, then partition, then the dependencies of what remains;
//! - `size.rs` — how many jobs a spec plans, capped before the plan is built;
//! - `render/` — the plan as text, Graphviz dot and JSON.
//!
//! Lifecycle: `Plan::build(&spec)` once per run; `plan.select(&filter, partition)` picks the
//! jobs; the runner (and `meshparity plan`) walk the selection in plan order, which is a
//! topological order because every job is added after its dependencies.
//!
//! Adding a new level: add it to `meshparity_specs::Level` (DAG order is its declaration order)
//! and to the families that support it; the planner chains it automatically.

mod build;
mod cell_key;
mod filter;
mod identity;
mod job;
pub mod job_file;
mod partition;
pub mod render;
mod select;
pub mod size;
mod variants;

pub use build::Plan;
pub use filter::{exact, Filter, FilterError};
pub use job::{Job, JobId, JobKind};
pub use partition::{Partition, PartitionError};
pub use select::{Role, Selection};
