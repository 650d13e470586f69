//! A run directory holds its evidence: what a judged job's record cites lives under the run
//! directory, and every path the record names is relative to it.
//!
//! A failed check's reproduce line named `OUTPUT/cache/reference-…/forward.safetensors`: the
//! shared cache, outside `--run-dir`, which is what CI uploads. A developer who downloaded the
//! run directory could rerun nothing. Now, once a job is judged, every file its cited
//! comparisons name ([`meshparity_judge::Finding::cited`]) that lies outside the run directory
//! is hard-linked (copied across filesystems, within [`COPY_BUDGET`] per run) into the job's
//! `evidence/`, and the record's paths — summary, reproduce lines, comparisons, repro — are
//! rewritten relative to the run directory: pasted there, in any copy of it, they work.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use meshparity_reports::JobRecord;

/// The directory of a job's attempt that holds the files it cites from outside the run.
pub const EVIDENCE: &str = "evidence";

/// The most bytes a run copies into its jobs' evidence when a hard link cannot be made (the
/// cache on another filesystem); past it a record keeps the cache's path, and says so.
pub const COPY_BUDGET: u64 = 4 << 30;

/// What a run has copied so far.
#[derive(Debug, Default)]
pub struct Evidence {
    copied: u64,
}

impl Evidence {
    /// Bring what `record` cites under `run_dir` (into `job_dir/evidence/`) and make its paths
    /// relative to `run_dir`. Engine runs' records (a reference, a training) are left as they
    /// are: their artifacts stay in the cache they are reused from.
    pub fn gather(&mut self, run_dir: &Path, job_dir: &Path, record: &mut JobRecord) {
        let Some(detail) = &record.detail else {
            return;
        };
        if matches!(detail, meshparity_judge::Finding::Artifacts(_)) {
            return;
        }
        let mut moved: BTreeMap<String, String> = BTreeMap::new();
        let mut over_budget = false;
        for path in crate::worker::cited(detail) {
            if !path.is_absolute() || path.starts_with(run_dir) || !path.is_file() {
                continue;
            }
            let Some(dest) = self.bring(&path, job_dir, &mut over_budget) else {
                continue;
            };
            moved.insert(path.display().to_string(), dest.display().to_string());
        }
        let mut value = serde_json::to_value(&*record).expect("records serialize");
        // Longest first: a path must not be rewritten by a prefix of it.
        let mut renames: Vec<(String, String)> = moved.into_iter().collect();
        renames.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        let root = format!("{}/", run_dir.display());
        rewrite(&mut value, &|s: &str| {
            let mut s = s.to_owned();
            for (from, to) in &renames {
                s = s.replace(from.as_str(), to);
            }
            s.replace(&root, "")
        });
        if let Ok(mut r) = serde_json::from_value::<JobRecord>(value) {
            // The repro's `command` file says what its record now says.
            if let Some(repro) = r.detail.as_ref().and_then(repro_of) {
                let file = run_dir.join(&repro.spec).with_file_name("command");
                if file.is_file() {
                    let _ = std::fs::write(&file, format!("{}\n", repro.command));
                }
            }
            if over_budget {
                r.summary.push_str(&format!(
                    "; some cited files stay in the cache: the run copied {} of evidence (its \
                     budget) where they could not be linked",
                    meshparity_reports::size(COPY_BUDGET)
                ));
            }
            *record = r;
        }
    }

    /// `path` linked (or copied) into `job_dir/evidence/PARENT/NAME`; `None` where neither
    /// could be made.
    fn bring(&mut self, path: &Path, job_dir: &Path, over: &mut bool) -> Option<PathBuf> {
        let parent = path.parent()?.file_name()?;
        let dest = job_dir.join(EVIDENCE).join(parent).join(path.file_name()?);
        if dest.is_file() {
            return Some(dest);
        }
        std::fs::create_dir_all(dest.parent()?).ok()?;
        if std::fs::hard_link(path, &dest).is_ok() {
            return Some(dest);
        }
        let len = std::fs::metadata(path).ok()?.len();
        if self.copied + len > COPY_BUDGET {
            *over = true;
            return None;
        }
        let mut from = meshparity_files::open(path).ok()?;
        let mut to = meshparity_files::create(&dest).ok()?;
        std::io::copy(&mut from, &mut to).ok()?;
        self.copied += len;
        Some(dest)
    }
}

fn repro_of(f: &meshparity_judge::Finding) -> Option<&meshparity_judge::Repro> {
    match f {
        meshparity_judge::Finding::Level(o) => o.repro.as_ref(),
        meshparity_judge::Finding::Mutation(m) => m.repro.as_ref(),
        meshparity_judge::Finding::Artifacts(_) => None,
    }
}

/// Every string in `v` through `f`.
fn rewrite(v: &mut serde_json::Value, f: &dyn Fn(&str) -> String) {
    match v {
        serde_json::Value::String(s) => *s = f(s),
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| rewrite(x, f)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|x| rewrite(x, f)),
        _ => {}
    }
}
