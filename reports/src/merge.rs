//! Shards merged back into one run: `meshparity report --merge A/results.json B/results.json`.
//!
//! Each job is taken from the shard that selected it (a shard also runs, and records, the
//! dependencies of its jobs, such as the reference, marked as such); the merged run has each
//! job once, in the order the shards list them, so its JUnit counts are the unsharded run's.

use indexmap::IndexMap;

use crate::model::{JobRecord, RunMeta, RunResults, FORMAT_VERSION};

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
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
    let mut jobs: IndexMap<String, JobRecord> = IndexMap::new();
    let mut meta = RunMeta {
        seconds: 0.0,
        ..first.clone()
    };
    for (i, shard) in shards.into_iter().enumerate() {
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
            match jobs.get(&job.id) {
                // The selecting shard's record wins over a dependency's.
                Some(have) if !have.dependency && job.dependency => {}
                _ => {
                    jobs.insert(job.id.clone(), job);
                }
            }
        }
    }
    meta.run_dir = String::new();
    Ok(RunResults {
        format_version: FORMAT_VERSION,
        meta,
        jobs: jobs.into_values().collect(),
    })
}

fn short(hash: &str) -> String {
    hash.chars().take(12).collect()
}
