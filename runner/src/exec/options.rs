//! How a run executes: concurrency, retries, failure limits, time limits, directories.

use std::path::PathBuf;
use std::time::Duration;

use globset::{Glob, GlobMatcher};

use crate::plan::Job;

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The binary that runs workers (normally this one).
    pub exe: PathBuf,
    pub spec: PathBuf,
    pub run_dir: PathBuf,
    pub cache_dir: PathBuf,
    /// CPU concurrency in slots; a job takes [`super::slots::Slots::weight`] of them.
    pub slots: usize,
    /// Concurrency on each GPU.
    pub gpu_slots: usize,
    /// `--device`: every job on this device, whatever the spec says (workers are told too).
    pub device: Option<meshparity_specs::Device>,
    pub retries: u32,
    /// Stop starting jobs after this many failures (`--fail-fast` is 1).
    pub max_fail: Option<usize>,
    pub timeouts: Timeouts,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    pub no_cache: bool,
    /// `--keep-artifacts`: judged jobs keep every file they wrote (traces, mutated runs), and
    /// the run its shared reference traces; otherwise only what a report cites stays.
    pub keep_artifacts: bool,
    /// Which failing jobs look for their smallest repro, and for how long (`--no-shrink`:
    /// `None`).
    pub shrink: Option<crate::shrink::policy::Policy>,
    /// A directory in memory the runner holds, where shrink searches make and delete their
    /// tries (`None`: each job's own directory; see [`meshparity_files::MemoryDir`]).
    pub tries: Option<PathBuf>,
    /// Where attempts run.
    pub executor: super::executor::ExecutorKind,
    /// `--no-skip`: a check runs after a failed check of its cell (it still waits for it);
    /// trainings, references and mutations are still skipped after a failure.
    pub no_skip: bool,
    /// How finished jobs' lines look (colour, whole summaries).
    pub lines: super::progress::LineStyle,
    /// What every job's fingerprint shares (the binary, a user program's files).
    pub basis: crate::fingerprint::Basis,
    /// The run directory's copy of the spec, relative to it (`spec/NAME.toml`): what every
    /// job's reproduce line runs, so it works from the run directory alone. `None`: the spec
    /// as given.
    pub spec_copy: Option<PathBuf>,
    /// The host memory the built-in engine's jobs share (`None`: not known): a job whose
    /// estimate is more than a CPU slot's share takes more slots ([`super::slots`]).
    pub memory: Option<Memory>,
}

/// The host memory jobs running at once share, and what one job needs.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    /// Bytes the run's jobs may use together (the machine's, or its cgroup's limit).
    pub room: f64,
    /// A built-in job's estimated peak, in bytes (its simulated ranks, all in one process).
    pub estimate: fn(&Job) -> f64,
}

/// Time limits: per level by default, overridable per level or per job-name glob.
#[derive(Clone, Debug, Default)]
pub struct Timeouts {
    /// Every job, unless a rule says otherwise.
    pub all: Option<Duration>,
    rules: Vec<(String, GlobMatcher, Duration)>,
}

/// Defaults by job kind: generous for the tiny built-in models on a slow CPU.
/// The longest time limit a run accepts: 30 days. Anything longer is a typo (or `1e30`), and
/// would not fit the clock arithmetic anyway.
pub const MAX_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

pub fn default_timeout(kind: &str) -> Duration {
    Duration::from_secs(match kind {
        "roundtrip" => 120,
        "forward" => 300,
        _ => 900,
    })
}

/// A `--timeout` item that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum TimeoutError {
    #[error(
        "--timeout `{0}`: expected SECONDS or KEY=SECONDS with 0 < SECONDS ≤ {MAX_SECONDS} (30 days)"
    )]
    Seconds(String),
    #[error("--timeout `{item}`: {source}")]
    Glob {
        item: String,
        source: globset::Error,
    },
}

impl Timeouts {
    /// `SECS` (every job) or `KEY=SECS` with KEY a level name (`reference`, `oracle`,
    /// `mutation`...) or a glob over job names.
    pub fn parse(items: &[String]) -> Result<Self, TimeoutError> {
        let mut t = Timeouts::default();
        for item in items {
            let (key, secs) = match item.rsplit_once('=') {
                Some((k, s)) => (Some(k), s),
                None => (None, item.as_str()),
            };
            let secs: f64 = secs
                .parse()
                .ok()
                .filter(|s: &f64| *s > 0.0 && *s <= MAX_SECONDS)
                .ok_or_else(|| TimeoutError::Seconds(item.clone()))?;
            let d = Duration::from_secs_f64(secs);
            match key {
                None => t.all = Some(d),
                Some(k) => {
                    let glob = Glob::new(k).map_err(|source| TimeoutError::Glob {
                        item: item.clone(),
                        source,
                    })?;
                    t.rules.push((k.to_owned(), glob.compile_matcher(), d));
                }
            }
        }
        Ok(t)
    }

    /// The `--timeout KEY=SECS` items whose KEY is neither a kind of job nor a glob that
    /// matches a job of the plan, each with what it should have been: `forwrd=1` was accepted
    /// and applied to nothing.
    pub fn unmatched(&self, jobs: &[&Job]) -> Vec<String> {
        use meshparity_specs::Keyword;
        let kinds: Vec<&str> = ["reference", "train", "mutation"]
            .into_iter()
            .chain(meshparity_specs::Level::ALL.iter().map(|(n, _)| *n))
            .collect();
        self.rules
            .iter()
            .filter(|(key, glob, _)| {
                !kinds.contains(&key.as_str()) && !jobs.iter().any(|j| glob.is_match(&j.name))
            })
            .map(|(key, _, _)| {
                format!(
                    "--timeout `{key}=…` matches no job: KEY is a kind of job ({}) or a glob \
                     over job names ({})",
                    kinds.join(", "),
                    meshparity_specs::suggest::did_you_mean(key, &kinds, "kind")
                )
            })
            .collect()
    }

    pub fn for_job(&self, job: &Job) -> Duration {
        let kind = job.kind.level_name();
        for (key, glob, d) in self.rules.iter().rev() {
            if key == kind || glob.is_match(&job.name) {
                return *d;
            }
        }
        self.all.unwrap_or_else(|| default_timeout(kind))
    }
}
