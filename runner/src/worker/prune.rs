//! What a judged job keeps on disk: the files its result cites, and nothing else.
//!
//! A mutation job trains a mutated mesh and, once caught, traces it and the reference site by
//! site to localize the bug; a failed check traces both runs again. Those traces and the mutated
//! run's shards are read once, by this worker, and their findings go into `result.json` (the
//! localization names the site and its value). Kept, they made the quickstart with a
//! hidden-192, 4-layer bf16 llama an 18 GB run directory and the full sweep 30 GB. What a report
//! points a person at is the pair of files behind each failed comparison (the `meshparity
//! compare` command its summary quotes), so those stay; the job's own records at the top of its
//! directory (logs, job and result files) stay; every other file the job wrote below it goes,
//! the mutated run's files that a passing comparison read included (their verdict and numbers
//! are in the result). `--keep-artifacts` keeps everything.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use meshparity_judge::Finding;

/// The name prefix of a reference trace the run's mutation jobs share, in its scratch directory.
pub(super) const SHARED_TRACE: &str = "trace-";

/// Remove the shared reference traces from a run's scratch directory.
pub fn drop_shared_traces(scratch: &Path) {
    let Ok(entries) = std::fs::read_dir(scratch) else {
        return;
    };
    for e in entries.flatten() {
        let named = e.file_name().to_string_lossy().starts_with(SHARED_TRACE);
        if named && e.file_type().is_ok_and(|k| k.is_dir()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Delete every file below `out`'s subdirectories that `finding` does not cite, then the
/// directories left empty. Files directly in `out` are the job's records and always stay.
/// Returns the bytes freed. Errors are ignored: what cannot be deleted stays, and the verdict
/// is already computed.
pub(super) fn prune(out: &Path, finding: Option<&Finding>) -> u64 {
    let cited = finding.map(cited).unwrap_or_default();
    let Ok(entries) = std::fs::read_dir(out) else {
        return 0;
    };
    let mut freed = 0;
    for entry in entries.flatten() {
        // Never follows a link: a link is an entry like a file, removed or kept itself.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            freed += prune_dir(&entry.path(), &cited);
        }
    }
    freed
}

/// Prune `dir` to the cited files; remove it when nothing is left. Returns the bytes freed.
fn prune_dir(dir: &Path, cited: &HashSet<PathBuf>) -> u64 {
    let mut freed = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(k) if k.is_dir() => freed += prune_dir(&path, cited),
                Ok(_) if !cited.contains(&path) => {
                    let size = entry.metadata().map_or(0, |m| m.len());
                    if std::fs::remove_file(&path).is_ok() {
                        freed += size;
                    }
                }
                _ => {}
            }
        }
    }
    // Fails, as it should, while a cited file is left inside.
    let _ = std::fs::remove_dir(dir);
    freed
}

/// The files a finding's cited comparisons ([`Finding::cited`]) name: each compared pair, and
/// every path in the `meshparity compare` command that re-derives it (a noise-floor curve's
/// second baseline).
pub(crate) fn cited(finding: &Finding) -> HashSet<PathBuf> {
    let mut out = HashSet::new();
    let repro = match finding {
        Finding::Mutation(m) => m.repro.as_ref(),
        Finding::Level(o) => o.repro.as_ref(),
        _ => None,
    };
    if let Some(r) = repro {
        let spec = PathBuf::from(&r.spec);
        out.insert(spec.with_file_name("command"));
        out.insert(spec);
    }
    for c in finding.cited() {
        out.extend(files_of(c));
    }
    out
}

/// The files one comparison names: its two sides (a trace with its index) and every path in
/// its compare line.
pub(super) fn files_of(c: &meshparity_judge::Comparison) -> HashSet<PathBuf> {
    let mut out = HashSet::new();
    for s in [&c.reference, &c.candidate] {
        if !s.is_empty() {
            let path = PathBuf::from(s);
            // A trace's values are read through its index.
            if path.ends_with(meshparity_engine::files::TRACE) {
                out.insert(path.with_file_name(meshparity_engine::files::TRACE_INDEX));
            }
            out.insert(path);
        }
    }
    out.extend(words(&c.reproduce).into_iter().map(PathBuf::from));
    out
}

/// The words of a command line as `meshparity_judge::judge::quote` writes them: plain words,
/// or single-quoted with `'\''` for a quote inside.
pub(crate) fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    let mut chars = line.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            '\\' if !quoted => {
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            c if c.is_whitespace() && !quoted => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_undo_the_judges_quoting() {
        let a = "/tmp/it's here/a.safetensors";
        let line = format!(
            "meshparity compare {} /x/b.safetensors --mode rel",
            meshparity_judge::judge::quote(a)
        );
        assert_eq!(
            words(&line),
            [
                "meshparity",
                "compare",
                a,
                "/x/b.safetensors",
                "--mode",
                "rel"
            ]
        );
    }

    #[test]
    fn only_cited_files_and_the_jobs_records_stay() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let write = |p: &str| {
            let p = out.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, vec![0u8; 100]).unwrap();
            p
        };
        write("stderr.log");
        write("updates.safetensors");
        let cited_run = write("run/forward.safetensors");
        write("run/weights.safetensors");
        write("run/shards/rank-00000.safetensors");
        write("trace/run/trace.safetensors");
        write("trace/reference/trace.json");
        let cited_judge = write("oracle/updates.safetensors");
        // A link the job left is removed as a link; its target outside is untouched.
        let outside = tempfile::NamedTempFile::new().unwrap();
        std::os::unix::fs::symlink(outside.path(), out.join("run/link")).unwrap();

        let comparison = |candidate: &Path, passed: bool, reproduce: String| {
            serde_json::json!({"what": "x", "reference": "/ref/forward.safetensors",
                "candidate": candidate, "passed": passed, "compared": 1, "gates": [],
                "reproduce": reproduce})
        };
        let failed = comparison(
            &cited_run,
            false,
            format!(
                "meshparity compare /ref/u.safetensors {}",
                cited_judge.display()
            ),
        );
        // A passing comparison's files are not cited by any report.
        let passed = comparison(&out.join("run/weights.safetensors"), true, String::new());
        let outcome: meshparity_judge::Outcome = serde_json::from_value(serde_json::json!({
            "level": "oracle", "passed": false, "comparisons": [passed, failed], "seconds": 0.0,
            "collectives": 0, "altered": [], "anomalies": []
        }))
        .unwrap();
        let freed = prune(out, Some(&Finding::Level(outcome)));

        // Four files of 100 bytes, and the link (its size is its target's path).
        assert_eq!(freed, 400 + outside.path().as_os_str().len() as u64);
        assert!(outside.path().exists());
        let mut left: Vec<String> = walk(out);
        left.sort();
        assert_eq!(
            left,
            [
                "oracle/updates.safetensors",
                "run/forward.safetensors",
                "stderr.log",
                "updates.safetensors"
            ]
        );
    }

    fn walk(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                } else {
                    let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                    out.push(rel);
                }
            }
        }
        out
    }
}
