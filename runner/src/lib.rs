//! meshparity's runner crate. For now it holds the planner: a validated spec expanded into a
//! DAG of jobs, with the selection tools (filters, partitions) CI uses to run a slice of it.
//! The scheduler and job processes will live beside it (see issue "Runner").

pub mod plan;

pub use plan::{Filter, Job, JobId, JobKind, Partition, Plan, Role, Selection};
