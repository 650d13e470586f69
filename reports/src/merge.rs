//! Shards merged back into one run: `meshparity report --merge A/results.json B/results.json`.
//!
//! Each job is taken from the shard that selected it (a shard also runs, and records, the
//! dependencies of its jobs, such as the reference, marked as such); the merged run has each
//! job once, in the order the shards list them, so its JUnit counts are the unsharded run's.
//!
//! Shards made with `--partition KIND:M/N` say so in their metadata; then the shards given must
//! be the N shards of one partition with one set of filters, each once — a missing or doubled
//! shard is an error, not a smaller or larger run that looks whole. A job that two shards both
//! selected and judged differently keeps the worse verdict, and its summary says so: the order
//! of the arguments never decides a verdict.

use indexmap::IndexMap;

use crate::model::{JobRecord, RunMeta, RunResults, Status, FORMAT_VERSION};

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
    #[error("{0}")]
    Coverage(String),
    #[error(
        "shard {index} ran spec `{found}` (BLAKE3 {found_hash}), the first shard `{first}` \
         (BLAKE3 {first_hash}): shards of one run come from one spec"
    )]
    OtherSpec {
        index: usize,
        first: String,
        first_hash: String,
        found: String,
        found_hash: String,
    },
}

pub fn merge(shards: Vec<RunResults>) -> Result<RunResults, MergeError> {
    let first = shards.first().ok_or(MergeError::Empty)?.meta.clone();
    for (i, shard) in shards.iter().enumerate() {
        let m = &shard.meta;
        if m.spec_hash != first.spec_hash {
            return Err(MergeError::OtherSpec {
                index: i + 1,
                first: first.spec.clone(),
                first_hash: short(&first.spec_hash),
                found: m.spec.clone(),
                found_hash: short(&m.spec_hash),
            });
        }
    }
    coverage(&shards)?;
    let mut jobs: IndexMap<String, JobRecord> = IndexMap::new();
    let mut meta = RunMeta {
        seconds: 0.0,
        ..first.clone()
    };
    for (i, shard) in shards.into_iter().enumerate() {
        let m = &shard.meta;
        // Shards run side by side: the merged run took as long as the slowest.
        meta.seconds = meta.seconds.max(m.seconds);
        meta.interrupted |= m.interrupted;
        if i > 0 {
            meta.disk_bytes = match (meta.disk_bytes, m.disk_bytes) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
        if m.started < meta.started {
            meta.started = m.started.clone();
        }
        if m.finished > meta.finished {
            meta.finished = m.finished.clone();
        }
        for job in shard.jobs {
            match jobs.get_mut(&job.id) {
                // The selecting shard's record wins over a dependency's.
                Some(have) if !have.dependency && job.dependency => {}
                Some(have) if !have.dependency && have.status != job.status => {
                    let said = format!(
                        " (shards disagree: {} in an earlier shard, {} in shard {}; the worse \
                         is kept)",
                        have.status.as_str(),
                        job.status.as_str(),
                        i + 1
                    );
                    if severity(job.status) > severity(have.status) {
                        *have = job;
                    }
                    have.summary.push_str(&said);
                }
                Some(have) if !have.dependency => {}
                _ => {
                    jobs.insert(job.id.clone(), job);
                }
            }
        }
    }
    meta.run_dir = String::new();
    meta.partition = None;
    Ok(RunResults {
        format_version: FORMAT_VERSION,
        meta,
        jobs: jobs.into_values().collect(),
    })
}

fn short(hash: &str) -> String {
    hash.chars().take(12).collect()
}

/// How bad a verdict is, for two shards that disagree.
fn severity(s: Status) -> u8 {
    match s {
        Status::Passed => 0,
        Status::Flaky => 1,
        Status::Skipped => 2,
        Status::NotRun => 3,
        Status::Timeout => 4,
        Status::Error => 5,
        Status::Failed => 6,
    }
}

/// The `i`-th results file given (counted from 1), and the run directory it came from: a
/// file's position is not its shard's number.
fn which(shards: &[RunResults], i: usize) -> String {
    match shards[i].meta.run_dir.as_str() {
        "" => format!("results file {}", i + 1),
        dir => format!("results file {} (run directory {dir})", i + 1),
    }
}

/// Shards that say which partition they are must be all of one partition, each once.
fn coverage(shards: &[RunResults]) -> Result<(), MergeError> {
    let parts: Vec<Option<&str>> = shards.iter().map(|s| s.meta.partition.as_deref()).collect();
    if parts.iter().all(Option::is_none) {
        return Ok(());
    }
    let fail = |m: String| Err(MergeError::Coverage(m));
    let mut seen: Vec<Option<usize>> = Vec::new();
    let mut scheme: Option<(&str, usize)> = None;
    for (i, p) in parts.iter().enumerate() {
        let Some(p) = p else {
            return fail(format!(
                "{} ran the whole plan while others ran a partition of it: merge the shards of \
                 one `--partition KIND:M/N` run",
                which(shards, i)
            ));
        };
        let parsed = p.split_once(':').and_then(|(kind, mn)| {
            let (m, n) = mn.split_once('/')?;
            Some((kind, m.parse::<usize>().ok()?, n.parse::<usize>().ok()?))
        });
        let Some((kind, m, n)) = parsed.filter(|(_, m, n)| *m >= 1 && m <= n) else {
            return fail(format!(
                "{} has an unreadable partition `{p}`",
                which(shards, i)
            ));
        };
        match scheme {
            None => {
                scheme = Some((kind, n));
                seen = vec![None; n];
            }
            Some(s) if s != (kind, n) => {
                return fail(format!(
                    "{} is `{p}`, {} is `{}:…/{}`: shards of one run share one partition",
                    which(shards, i),
                    which(shards, 0),
                    s.0,
                    s.1
                ))
            }
            Some(_) => {}
        }
        if let Some(before) = seen[m - 1] {
            return fail(format!(
                "{} and {} are both shard `{p}`: each shard is merged once",
                which(shards, before),
                which(shards, i)
            ));
        }
        seen[m - 1] = Some(i);
        if shards[i].meta.filters != shards[0].meta.filters {
            return fail(format!(
                "{} selected with other filters ({:?}) than {} ({:?})",
                which(shards, i),
                shards[i].meta.filters,
                which(shards, 0),
                shards[0].meta.filters
            ));
        }
    }
    let missing: Vec<String> = seen
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_none())
        .map(|(m, _)| (m + 1).to_string())
        .collect();
    if let (false, Some((kind, n))) = (missing.is_empty(), scheme) {
        return fail(format!(
            "shard(s) {} of `{kind}:…/{n}` are missing: the merged run would look whole \
             without their jobs",
            missing.join(", ")
        ));
    }
    Ok(())
}
