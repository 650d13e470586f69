//! Graphviz: `meshparity plan spec.toml --format dot | dot -Tsvg`.

use std::fmt::Write;

use crate::plan::{JobKind, Plan, Role, Selection};

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

pub fn dot(plan: &Plan, sel: &Selection) -> String {
    let mut out = format!(
        "digraph {} {{\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n",
        quote(&plan.spec_name)
    );
    let mut included = vec![false; plan.len()];
    for &(node, role) in &sel.jobs {
        included[node.index()] = true;
        let job = &plan.graph[node];
        let mut attrs = vec![format!("label={}", quote(&job.name))];
        match job.kind {
            JobKind::Reference => attrs.push("shape=ellipse".into()),
            JobKind::Mutation { .. } => attrs.push("color=firebrick".into()),
            JobKind::Train { .. } => attrs.push("shape=box".into()),
            JobKind::Check { .. } => {}
        }
        if role == Role::Dependency {
            attrs.push("style=dashed".into());
        }
        let _ = writeln!(
            out,
            "  {} [{}];",
            quote(&job.id.to_string()),
            attrs.join(", ")
        );
    }
    for &(node, _) in &sel.jobs {
        for dep in plan.dependencies(node) {
            if included[dep.index()] {
                let _ = writeln!(
                    out,
                    "  {} -> {};",
                    quote(&plan.graph[dep].id.to_string()),
                    quote(&plan.graph[node].id.to_string())
                );
            }
        }
    }
    out.push_str("}\n");
    out
}
