//! A caught mutation keeps one failed comparison's files: the smallest that re-derives the
//! catch.
//!
//! A caught mutation is the check doing its job; what a person (or an auditor) needs on disk is
//! one failed comparison's files — a `meshparity compare` line that fails when pasted, where
//! one has a compare line — and the record's numbers for the rest. Keeping every failed
//! comparison's files made the full sweep's run directory 1.6 GB, 1.1 GB of it the gradients
//! (f32) and weight updates (f64) of mutations a forward or curve comparison of a hundredth the
//! size had already caught (docs/performance.md). So of a caught mutation's failed comparisons
//! that cite files, the one whose own files (those below the job's directory) are fewest bytes
//! keeps them, one with a compare line before one without (a trace has none, and is kept only
//! where the catch rests on it alone, as before); each other is marked
//! [`Comparison::unkept`] (the HTML report says so beside it) and its compare line emptied.
//! A missed mutation and a failed check keep everything they cite: they are what a person
//! investigates.
//!
//! The record likewise keeps what its reports show: each comparison's per-tensor table is cut to
//! the rows the worst-tensors table lists ([`meshparity_reports::view::worst_tensors`]), the
//! count of the rest beside it (`tensors_omitted`); its counts and every gate — subject, value
//! and limit of each tensor compared — stay. A mutation's record was ~62 KB, a third of it
//! passing tensors' metrics, and the full sweep writes 2,289 of them twice (results.jsonl and
//! results.json).

use std::path::Path;

use meshparity_judge::{Comparison, Finding};

/// Mark every failed comparison of a caught mutation but the cheapest to keep as unkept.
pub(super) fn choose(out: &Path, finding: Option<&mut Finding>) {
    let Some(finding) = finding else {
        return;
    };
    if !finding.mutation().is_some_and(|m| m.caught) {
        return;
    }
    let mut failed: Vec<&mut Comparison> = finding
        .comparisons_mut()
        .into_iter()
        .filter(|c| !c.passed)
        .collect();
    // One with a compare line first: pasted, it fails, which is the catch re-derived.
    let cost = |c: &Comparison| (c.reproduce.is_empty(), own_bytes(out, c));
    let with_files = (0..failed.len()).filter(|&i| names_a_file(failed[i]));
    let best = with_files.min_by_key(|&i| cost(failed[i]));
    // A comparison without one (a trace) is kept only where the catch rests on it alone: beside
    // another failure (rank shards that did not merge) the record's numbers show the catch.
    let kept = best.filter(|&i| !failed[i].reproduce.is_empty() || failed.len() == 1);
    for (i, c) in failed.iter_mut().enumerate() {
        if Some(i) != kept && names_a_file(c) {
            c.unkept = true;
            c.reproduce.clear();
        }
    }
}

/// Cut each per-tensor table of a caught mutation's comparisons to the rows its reports show.
pub(super) fn shown_rows(finding: Option<&mut Finding>) {
    let Some(finding) = finding else {
        return;
    };
    if !finding.mutation().is_some_and(|m| m.caught) {
        return;
    }
    let shown = meshparity_reports::view::WORST;
    for c in finding.comparisons_mut() {
        let Some(total) = c.report["tensors"].as_array().map(Vec::len) else {
            continue;
        };
        if total <= shown {
            continue;
        }
        let rows: Vec<serde_json::Value> = meshparity_reports::view::worst_tensors(&c.report)
            .into_iter()
            .take(shown)
            .cloned()
            .collect();
        c.report["tensors"] = serde_json::Value::Array(rows);
        c.report["tensors_omitted"] = (total - shown).into();
    }
}

fn names_a_file(c: &Comparison) -> bool {
    [&c.reference, &c.candidate]
        .into_iter()
        .any(|p| !p.is_empty() && Path::new(p).is_file())
}

/// Bytes of the files `c` names that lie below `out` (the job's own; a reference's are shared
/// by every job of the run and kept once).
fn own_bytes(out: &Path, c: &Comparison) -> u64 {
    super::prune::files_of(c)
        .iter()
        .filter(|p| p.starts_with(out))
        .filter_map(|p| std::fs::metadata(p).ok().filter(|m| m.is_file()))
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::{choose, shown_rows};
    use meshparity_judge::{Comparison, Finding};

    fn comparison(what: &str, file: &std::path::Path, passed: bool) -> Comparison {
        let c = serde_json::json!({
            "what": what, "reference": "/cache/ref", "candidate": file.display().to_string(),
            "passed": passed, "compared": 1, "gates": [],
            "reproduce": format!("meshparity compare /cache/ref {}", file.display()),
        });
        serde_json::from_value(c).unwrap()
    }

    fn mutation(caught: bool, comparisons: Vec<Comparison>) -> Finding {
        let m = serde_json::json!({
            "mutation": "m", "caught": caught, "caught_by": if caught { vec!["oracle"] } else { vec![] },
            "altered": ["site"], "seconds": 0.0,
            "levels": [{ "level": "oracle", "passed": false, "comparisons": comparisons,
                         "collectives": 0, "altered": [], "anomalies": [], "seconds": 0.0 }],
        });
        serde_json::from_value(m).unwrap()
    }

    /// Of a caught mutation's failed comparisons the smallest keeps its files and compare
    /// line; the others are marked unkept, lose their compare line and cite nothing. A missed
    /// one keeps everything.
    #[test]
    fn a_caught_mutation_keeps_its_smallest_failed_comparison() {
        let dir = tempfile::tempdir().unwrap();
        let (big, small, passing) = (
            dir.path().join("grads"),
            dir.path().join("forward"),
            dir.path().join("ok"),
        );
        std::fs::write(&big, vec![0u8; 1000]).unwrap();
        std::fs::write(&small, vec![0u8; 10]).unwrap();
        std::fs::write(&passing, vec![0u8; 1]).unwrap();
        let trace = dir.path().join("trace");
        std::fs::write(&trace, vec![0u8; 1]).unwrap();
        let all = || {
            let mut traced = comparison("traced sites", &trace, false);
            traced.reproduce.clear();
            vec![
                comparison("gradients", &big, false),
                comparison("logits and loss", &small, false),
                comparison("checkpoint", &passing, true),
                traced,
            ]
        };
        let mut caught = mutation(true, all());
        choose(dir.path(), Some(&mut caught));
        let cited = caught.cited();
        assert_eq!(cited.len(), 1);
        assert_eq!(cited[0].what, "logits and loss");
        assert!(!cited[0].reproduce.is_empty());
        let grads = caught.comparisons()[0];
        assert!(grads.unkept && grads.reproduce.is_empty());
        assert!(
            !caught.comparisons()[2].unkept,
            "a passing comparison is left as it is"
        );
        // Smaller, but with no compare line that would re-derive the catch.
        assert!(caught.comparisons()[3].unkept);
        // The summary cites the kept line, never the files of the first failure, now gone.
        let summary = caught.mutation().unwrap().summary();
        let kept = format!("meshparity compare /cache/ref {}", small.display());
        assert!(
            summary.contains(&format!("(reproduce, by oracle logits and loss: {kept})")),
            "{summary}"
        );
        assert!(!summary.contains(&big.display().to_string()), "{summary}");

        let mut missed = mutation(false, all());
        choose(dir.path(), Some(&mut missed));
        assert_eq!(missed.cited().len(), 4);

        // A trace alone keeps its files; beside a failure that names none, it does not.
        let traced = all().pop().unwrap();
        let mut alone = mutation(true, vec![traced.clone()]);
        choose(dir.path(), Some(&mut alone));
        assert_eq!(alone.cited().len(), 1);
        let mut unmerged = comparison("gradients", std::path::Path::new("2 rank shards"), false);
        unmerged.reproduce.clear();
        let mut beside = mutation(true, vec![unmerged, traced]);
        choose(dir.path(), Some(&mut beside));
        let cited: Vec<&str> = beside.cited().iter().map(|c| c.what.as_str()).collect();
        assert_eq!(
            cited,
            ["gradients"],
            "the unmerged shards name no file to drop"
        );
        assert!(beside.comparisons()[1].unkept);
    }

    /// A caught mutation's per-tensor tables keep the rows the report shows, worst first, and
    /// say how many were left out; a missed one's stay whole.
    #[test]
    fn a_caught_mutations_record_keeps_the_rows_its_report_shows() {
        let table = |n: usize| -> Vec<Comparison> {
            let tensors: Vec<serde_json::Value> = (0..n)
                .map(|i| {
                    serde_json::json!({
                        "name": format!("t{i}"), "passed": i != 3,
                        "metrics": { "relative_l2": i as f64 },
                    })
                })
                .collect();
            let mut c = comparison("gradients", std::path::Path::new("/x"), false);
            c.report = serde_json::json!({ "tensors": tensors });
            vec![c]
        };
        let mut caught = mutation(true, table(20));
        shown_rows(Some(&mut caught));
        let report = &caught.comparisons()[0].report;
        let names: Vec<&str> = report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["t3", "t19", "t18", "t17", "t16", "t15", "t14", "t13"]
        );
        assert_eq!(report["tensors_omitted"], 12);
        let mut missed = mutation(false, table(20));
        shown_rows(Some(&mut missed));
        assert_eq!(
            missed.comparisons()[0].report["tensors"]
                .as_array()
                .unwrap()
                .len(),
            20
        );
    }
}
