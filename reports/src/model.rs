//! The result model: one `RunResults` per run, one `JobRecord` per planned job.

use meshparity_judge::Finding;
use serde::{Deserialize, Serialize};

/// Bumped on incompatible changes of `results.json`.
pub const FORMAT_VERSION: u32 = 1;

/// Where a job ended up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Passed,
    /// A check found a difference (or a mutation went uncaught).
    Failed,
    /// Infrastructure: the job crashed, could not start, or wrote no result.
    Error,
    /// Killed after its time limit.
    Timeout,
    /// Not run because a dependency did not pass.
    Skipped,
    /// Not started: the run was interrupted or stopped by --fail-fast / --max-fail.
    NotRun,
    /// Passed after an infrastructure failure was retried.
    Flaky,
}

impl Status {
    /// Every status, in the order reports list them.
    pub const ALL: [Status; 7] = [
        Status::Passed,
        Status::Flaky,
        Status::Failed,
        Status::Error,
        Status::Timeout,
        Status::Skipped,
        Status::NotRun,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Error => "error",
            Status::Timeout => "timeout",
            Status::Skipped => "skipped",
            Status::NotRun => "not-run",
            Status::Flaky => "flaky",
        }
    }

    pub fn passed(self) -> bool {
        matches!(self, Status::Passed | Status::Flaky)
    }

    /// Failures of the infrastructure rather than of a check: these are retried.
    pub fn is_infra(self) -> bool {
        matches!(self, Status::Error | Status::Timeout)
    }
}

/// One execution of a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Attempt {
    pub status: Status,
    pub seconds: f64,
    /// Exit code, or the signal that ended the process (as `signal N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<String>,
    /// The last lines of the job's stdout and stderr, for errors and timeouts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub log_tail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// A planned job and what became of it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    pub name: String,
    /// `reference`, a level name, or `mutation`.
    pub kind: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutation: Option<String>,
    pub dtype: String,
    /// `cpu`, `gpu`, `gpu:N`: where the job computed (its reference computed there too).
    #[serde(default = "cpu")]
    pub device: String,
    /// The adapter that computed it, as the worker found it (`cpu`, or a GPU's name, API and
    /// kind); empty when no worker reported.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub adapter: String,
    pub world_size: u64,
    pub status: Status,
    /// One line: what matched, the first thing over its limit, why it was skipped.
    pub summary: String,
    pub seconds: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// Ids of the jobs this one needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// Whether a reference's artifacts came from the cache.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    /// Ran only because a selected job needs it (`--filter`, `--partition`): the shard or
    /// filter that selects it reports it; JUnit leaves it out here, so merged shards count
    /// every job once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dependency: bool,
    /// Command that re-runs this job alone.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reproduce: String,
    /// What the verdict was judged under (the job as planned, its dependencies', the binary,
    /// a user program's spec and files): `--resume` keeps a record only while it is the job's
    /// fingerprint in the resuming run. Empty in records older than the field.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fingerprint: String,
    /// Of the job's wall time, what shrinking its failure to a repro took; `seconds` is the
    /// rest (the check's own: what JUnit reports).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shrink_seconds: f64,
    /// The engine's findings: comparisons with their metrics and limits, collectives, faults.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "Finding::lenient"
    )]
    pub detail: Option<Finding>,
}

/// The HTML report's anchor of `job` (`report.html#job-ID`), which the Markdown summary and
/// the notes link to.
pub fn anchor(job: &JobRecord) -> String {
    format!("job-{}", job.id)
}

/// What the run was.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunMeta {
    pub spec: String,
    pub spec_name: String,
    /// BLAKE3 of the spec file's bytes.
    pub spec_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
    pub host: String,
    pub backend: String,
    pub device: String,
    pub seed: u64,
    pub meshparity_version: String,
    /// RFC 3339.
    pub started: String,
    pub finished: String,
    pub seconds: f64,
    pub interrupted: bool,
    pub run_dir: String,
    /// Bytes the run directory held when the run ended, before its reports (merged shards:
    /// the sum of theirs). Reported, since a run keeps only what its reports cite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// The shard of the plan this run was (`--partition`, e.g. `hash:2/3`), for `report
    /// --merge` to check that shards cover the plan once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The `--filter`s the run selected with (shards of one run use the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResults {
    pub format_version: u32,
    pub meta: RunMeta,
    pub jobs: Vec<JobRecord>,
}

impl RunResults {
    pub fn count(&self, status: Status) -> usize {
        self.jobs.iter().filter(|j| j.status == status).count()
    }
}

fn cpu() -> String {
    "cpu".to_owned()
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}
