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
    // Where jobs compute, said once, when anything leaves the CPU.
    let mut devices: Vec<(String, usize, Vec<&str>)> = Vec::new();
    for (node, _) in &sel.jobs {
        let job = &plan.graph[*node];
        let d = job.device.to_string();
        let at = match devices.iter().position(|(name, ..)| *name == d) {
            Some(i) => i,
            None => {
                devices.push((d, 0, Vec::new()));
                devices.len() - 1
            }
        };
        devices[at].1 += 1;
        if let Some(t) = job.tolerance.as_deref() {
            if !devices[at].2.contains(&t) {
                devices[at].2.push(t);
            }
        }
    }
    if devices.iter().any(|(d, ..)| d != "cpu") {
        let parts: Vec<String> = devices
            .iter()
            .map(|(d, n, tables)| format!("{n} on {d} (tolerance {})", tables.join(", ")))
            .collect();
        let _ = writeln!(out, "  devices: {}", parts.join("; "));
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
