//! The plan as versioned JSON, for scripts and for the runner's cluster executors.

use serde::Serialize;

use crate::plan::{Job, JobId, Plan, Role, Selection};

/// Bumped on any incompatible change of the JSON layout.
pub const PLAN_FORMAT_VERSION: u32 = 1;

#[derive(Serialize)]
struct PlanJson<'a> {
    format_version: u32,
    spec: &'a str,
    name: &'a str,
    total_jobs: usize,
    selected: usize,
    dependencies: usize,
    jobs: Vec<JobJson<'a>>,
}

#[derive(Serialize)]
struct JobJson<'a> {
    role: Role,
    #[serde(flatten)]
    job: &'a Job,
    after: Vec<JobId>,
}

pub fn json(plan: &Plan, sel: &Selection, source: &str) -> String {
    let doc = PlanJson {
        format_version: PLAN_FORMAT_VERSION,
        spec: source,
        name: &plan.spec_name,
        total_jobs: plan.len(),
        selected: sel.count(Role::Selected),
        dependencies: sel.count(Role::Dependency),
        jobs: sel
            .jobs
            .iter()
            .map(|&(node, role)| JobJson {
                role,
                job: &plan.graph[node],
                after: plan
                    .dependencies(node)
                    .iter()
                    .map(|d| plan.graph[*d].id)
                    .collect(),
            })
            .collect(),
    };
    let mut s = serde_json::to_string_pretty(&doc).expect("plans serialize");
    s.push('\n');
    s
}
