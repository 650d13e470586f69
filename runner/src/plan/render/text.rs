//! One line per job, in plan order, with what it waits for.

use std::fmt::Write;

use crate::plan::{Plan, Role, Selection};

pub fn text(plan: &Plan, sel: &Selection, source: &str) -> String {
    let selected = sel.count(Role::Selected);
    let deps = sel.count(Role::Dependency);
    let mut out = format!(
        "plan `{}` from {source}: {selected} of {} jobs selected",
        plan.spec_name,
        plan.len()
    );
    if deps > 0 {
        let _ = write!(out, ", {deps} more as dependencies");
    }
    out.push('\n');
    if sel.is_empty() {
        return out;
    }
    let width = sel
        .jobs
        .iter()
        .map(|(n, _)| plan.graph[*n].name.len())
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "  {:<16}  {:<width$}  {:>5}  AFTER",
        "ID", "JOB", "RANKS"
    );
    for &(node, role) in &sel.jobs {
        let job = &plan.graph[node];
        let after: Vec<&str> = plan
            .dependencies(node)
            .iter()
            .map(|d| plan.graph[*d].name.as_str())
            .collect();
        let mut line = format!(
            "  {}  {:<width$}  {:>5}  {}",
            job.id,
            job.name,
            job.world_size,
            if after.is_empty() {
                "-".to_owned()
            } else {
                after.join(", ")
            }
        );
        if role == Role::Dependency {
            line.push_str("  (dependency)");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
