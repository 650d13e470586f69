//! The shape of this module, checked: no import cycle between its folders, nor between the
//! files of one folder. A cycle is how the old flat `parallel/` grew a five-file knot
//! (experts, pipeline, router, stage, step); this test keeps one from coming back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each unit's imports: folders (and top-level files) by `crate::parallel::NAME`, and the files
/// of one folder by `super::NAME`, as `folder/NAME`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/parallel");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            for f in std::fs::read_dir(&path).unwrap() {
                files.push(f.unwrap().path());
            }
        } else {
            files.push(path);
        }
    }
    for path in files {
        let rel = path.strip_prefix(&root).unwrap().with_extension("");
        let parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let folder = parts[0].clone();
        let unit = parts.join("/");
        let text = std::fs::read_to_string(&path).unwrap();
        // Code only: no comments, no test module.
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let named = |prefix: &str| -> Vec<String> {
            code.match_indices(prefix)
                .map(|(i, _)| {
                    code[i + prefix.len()..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect()
                })
                .collect()
        };
        let deps = graph.entry(folder.clone()).or_default();
        deps.extend(
            named("crate::parallel::")
                .into_iter()
                .filter(|n| *n != folder),
        );
        if parts.len() == 2 {
            let siblings = graph.entry(unit.clone()).or_default();
            for name in named("super::") {
                if root.join(&folder).join(format!("{name}.rs")).exists() {
                    siblings.insert(format!("{folder}/{name}"));
                }
            }
        }
    }
    graph
}

/// A cycle in `graph`, if there is one, as the units on it.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        n: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            return Some(path[i..].to_vec());
        }
        if !done.insert(n.to_owned()) {
            return None;
        }
        path.push(n.to_owned());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(g, m, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

#[test]
fn parallel_has_no_import_cycle() {
    let graph = imports();
    assert_eq!(cycle(&graph), None, "{graph:#?}");
    // The folders' order, bottom up: what each may use.
    assert!(graph["topology"].is_empty(), "{:?}", graph["topology"]);
    assert!(!graph["comm"].contains("layers") && !graph["comm"].contains("exec"));
    assert!(!graph["layers"].contains("exec"), "{:?}", graph["layers"]);
    // The test can fail: a cycle is found where there is one.
    let mut knot = graph.clone();
    knot.entry("topology".into())
        .or_default()
        .insert("exec".into());
    assert!(cycle(&knot).is_some());
}

/// Whether `code` (comment lines left out) asks a mutation directly: the `Fault` type, or a
/// `.fault` field or method.
fn reads_a_fault(code: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .any(|l| {
            let word = |w: &str| {
                l.match_indices(w).any(|(i, _)| {
                    let first = w.starts_with('.') || !part(l[..i].chars().next_back());
                    first && !part(l[i + w.len()..].chars().next())
                })
            };
            word("Fault") || word(".fault")
        })
}

/// The training path reads [`super::fault::Policies`], never the mutation: the sites in
/// `comm/`, `exec/`, `layers/` and `zero/` see plain flags, factors and hooks decided once when
/// the run was built (`fault/policy.rs`), so a new mutation is one entry there, not a guard in
/// a layer.
#[test]
fn the_sites_read_policies_not_faults() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/parallel");
    let mut readers = Vec::new();
    for folder in ["comm", "exec", "layers", "zero"] {
        for f in std::fs::read_dir(root.join(folder)).unwrap() {
            let path = f.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            if reads_a_fault(text.split("#[cfg(test)]").next().unwrap()) {
                readers.push(path.display().to_string());
            }
        }
    }
    assert!(readers.is_empty(), "sites reading a Fault: {readers:#?}");
    // The check can fail: a guard on the mutation is found, a policy read or a `NormFault` is not.
    assert!(reads_a_fault("if comm.fault().is_some_and(|f| f.x()) {"));
    assert!(reads_a_fault("fn f(fault: Option<Fault>) {}"));
    assert!(!reads_a_fault(
        "if comm.policies().grads.zero_shard_misaligned {"
    ));
    assert!(!reads_a_fault("norm: Option<NormFault>,"));
    assert!(!reads_a_fault("let f = self.faults(comm, l);"));
}
