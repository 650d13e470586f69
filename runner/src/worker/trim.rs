//! A kept trace keeps the sites its comparison names.
//!
//! The trace level's failed comparison cites both runs' whole traces: every site of the first
//! steps, in f64 — 30–80 MB a job on the full sweep's moe meshes with CP, 2.07 GB of its 3.3 GB
//! run directory (docs/performance.md). What the job's result says of them is the failing
//! class's site and the five sites nearest their limits, each error beside its bound; a person
//! opening the kept files looks for those. So the job's own trace is rewritten to those entries
//! (the index with it); the reference's, shared by every job of its reference and kept once by
//! the run's deduplication, stays whole.

use std::collections::HashSet;
use std::path::Path;

use meshparity_engine::files;
use meshparity_engine::trace::{read_trace, write_trace};
use meshparity_judge::Finding;

/// Rewrite each trace of this job (below `out`) that `finding` cites to the sites its
/// comparison names. Returns the bytes freed. Errors leave the trace whole: it is evidence,
/// and the verdict is already computed.
pub(super) fn trim(out: &Path, finding: Option<&Finding>) -> u64 {
    let Some(finding) = finding else {
        return 0;
    };
    let mut freed = 0;
    for c in finding.cited() {
        if c.what != meshparity_judge::sites::WHAT {
            continue;
        }
        let candidate = Path::new(&c.candidate);
        let Some(dir) = candidate.parent().filter(|_| candidate.starts_with(out)) else {
            continue;
        };
        let mut named: HashSet<&str> = c.gates.iter().map(|g| g.subject.as_str()).collect();
        if let Some(sites) = c.report.get("sites").and_then(|s| s.as_array()) {
            named.extend(sites.iter().filter_map(|s| s.get("site")?.as_str()));
        }
        freed += keep_only(dir, &named).unwrap_or(0);
    }
    freed
}

/// Keep `named` of the trace in `dir`; the bytes freed.
fn keep_only(dir: &Path, named: &HashSet<&str>) -> Option<u64> {
    let size = |d: &Path| {
        [files::TRACE, files::TRACE_INDEX]
            .iter()
            .map(|f| std::fs::metadata(d.join(f)).map_or(0, |m| m.len()))
            .sum::<u64>()
    };
    let before = size(dir);
    let (mut index, mut tensors) = read_trace(dir).ok()?;
    index.entries.retain(|e| named.contains(e.key.as_str()));
    tensors.retain(|k, _| named.contains(k.as_str()));
    // A comparison that names none of the trace's sites keeps it whole: an empty file would
    // be evidence of nothing.
    if index.entries.is_empty() {
        return None;
    }
    // Each file is written beside and renamed over the old one: a failure leaves the old one,
    // and a link to it elsewhere keeps what it was.
    write_trace(dir, &index, &tensors).ok()?;
    Some(before.saturating_sub(size(dir)))
}

#[cfg(test)]
mod tests {
    use super::keep_only;
    use indexmap::IndexMap;
    use meshparity_compare::TensorDtype;
    use meshparity_engine::trace::{read_trace, write_trace, TraceEntry, TraceIndex};
    use meshparity_engine::HostTensor;

    #[test]
    fn a_trace_keeps_the_named_sites_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = TraceIndex {
            microbatches: 1,
            entries: Vec::new(),
            program: false,
            left_out: Vec::new(),
        };
        let mut tensors = IndexMap::new();
        for (i, key) in ["s0.a", "s0.b", "s0.c"].into_iter().enumerate() {
            index.entries.push(TraceEntry {
                key: key.into(),
                like: key.into(),
                blocks: 0,
                over: Vec::new(),
            });
            let bytes = (0..1000)
                .flat_map(|x| (x as f64 + i as f64).to_le_bytes())
                .collect();
            let t = HostTensor {
                dtype: TensorDtype::F64,
                shape: vec![1000],
                bytes,
            };
            tensors.insert(key.to_owned(), t);
        }
        write_trace(dir.path(), &index, &tensors).unwrap();
        // Naming none of its sites leaves the trace whole.
        assert_eq!(keep_only(dir.path(), &["s9.z"].into_iter().collect()), None);
        assert_eq!(read_trace(dir.path()).unwrap().0.entries.len(), 3);
        let freed = keep_only(dir.path(), &["s0.b"].into_iter().collect()).unwrap();
        assert!(freed > 15_000, "{freed}");
        let (kept, values) = read_trace(dir.path()).unwrap();
        assert_eq!(kept.entries.len(), 1);
        assert_eq!(kept.entries[0].key, "s0.b");
        assert_eq!(values["s0.b"], tensors["s0.b"]);
    }
}
