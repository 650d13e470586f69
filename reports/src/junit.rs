//! JUnit XML for CI systems, written with quick-junit (which filters characters XML cannot
//! carry, ANSI escapes included, and escapes the rest).
//!
//! One testsuite per model; testcase classname `<spec>.<model>@<dtype>.<mesh>` (the dtype keeps
//! cases unique when a model runs in several dtypes; GitLab keeps only the first of duplicates)
//! and name `<level>`, `mutation[<name>]` or `reference`. Failures carry the failing metric,
//! value and limit; errors (crash, timeout) the log tail in system-out; skipped and not-run jobs
//! their reason; flaky jobs their failed attempts as flaky elements. Suites carry the run
//! metadata as properties, the run's start as `timestamp`, their jobs' total `time` and a
//! `skipped` count (not `disabled`: nothing is disabled, jobs are skipped after a failed
//! dependency). Each case names the spec in `file`, which GitHub and GitLab annotate from.

use std::time::Duration;

use indexmap::IndexMap;
use meshparity_judge::Finding;
use quick_junit::{
    NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestRerun, TestSuite,
};

use crate::model::{Attempt, JobRecord, RunMeta, RunResults, Status};

/// The case's classname and name.
pub fn case_names(spec: &str, job: &JobRecord) -> (String, String) {
    let mesh = job.mesh.as_deref().unwrap_or("reference");
    let class = format!("{spec}.{}@{}.{mesh}", job.model, job.dtype);
    let name = match (&job.mutation, &job.level) {
        (Some(m), _) => format!("mutation[{m}]"),
        (None, Some(l)) => l.clone(),
        _ => job.kind.clone(),
    };
    (class, name)
}

fn rerun(a: &Attempt) -> TestRerun {
    let mut r = TestRerun::new(if a.status == Status::Failed {
        NonSuccessKind::Failure
    } else {
        NonSuccessKind::Error
    });
    r.set_message(format!(
        "attempt ended {}{}",
        a.status.as_str(),
        a.exit
            .as_deref()
            .map(|e| format!(" (exit {e})"))
            .unwrap_or_default()
    ));
    r.set_time(seconds(a.seconds));
    if !a.log_tail.is_empty() {
        r.set_system_out(a.log_tail.as_str());
    }
    r
}

fn status(job: &JobRecord) -> TestCaseStatus {
    let earlier: Vec<&Attempt> = job
        .attempts
        .iter()
        .take(job.attempts.len().saturating_sub(1))
        .collect();
    match job.status {
        Status::Passed => TestCaseStatus::success(),
        Status::Flaky => TestCaseStatus::Success {
            flaky_runs: earlier.iter().map(|a| rerun(a)).collect(),
        },
        Status::Failed | Status::Error | Status::Timeout => {
            let kind = if job.status == Status::Failed {
                NonSuccessKind::Failure
            } else {
                NonSuccessKind::Error
            };
            let mut s = TestCaseStatus::non_success(kind);
            s.set_message(headline(&job.summary));
            s.set_type(match job.status {
                Status::Failed if job.mutation.is_some() => "mutation-not-caught",
                Status::Failed => "tolerance-exceeded",
                Status::Timeout => "timeout",
                _ => "crash",
            });
            s.set_description(failure_details(job));
            s.add_reruns(earlier.iter().map(|a| rerun(a)));
            s
        }
        Status::Skipped | Status::NotRun => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(job.summary.as_str());
            s.set_type(job.status.as_str());
            s
        }
    }
}

/// The most a failure's one-line message holds.
const HEADLINE: usize = 200;

/// A failure's message: the summary's first clause, on one line (CI pages show it in a list;
/// the whole summary is the failure's text).
pub fn headline(summary: &str) -> String {
    let first = summary.lines().next().unwrap_or_default();
    let first = first
        .split(" (reproduce")
        .next()
        .unwrap_or(first)
        .split("; ")
        .next()
        .unwrap_or(first);
    let mut out: String = first.chars().take(HEADLINE).collect();
    if first.chars().count() > HEADLINE {
        out.push('…');
    }
    out
}

/// A failure's text: the whole summary, every failed comparison on a line, and the commands
/// that reproduce it — the job, and each comparison's `meshparity compare` — to paste in the
/// run directory (GitLab shows this text, not the properties).
pub fn failure_details(job: &JobRecord) -> String {
    let mut out = vec![job.summary.clone()];
    let cited: Vec<_> = job.detail.iter().flat_map(|d| d.cited()).collect();
    if !cited.is_empty() {
        out.push(String::new());
        out.push("failed comparisons:".into());
        for c in &cited {
            out.push(format!(
                "  {}: {}",
                c.what,
                c.failure.as_deref().unwrap_or("mismatch")
            ));
        }
    }
    let compares = cited.iter().map(|c| c.reproduce.as_str());
    let lines: Vec<&str> = std::iter::once(job.reproduce.as_str())
        .chain(compares)
        .filter(|l| !l.is_empty())
        .collect();
    if !lines.is_empty() {
        out.push(String::new());
        out.push("reproduce (in the run directory):".into());
        out.extend(lines.iter().map(|l| format!("  {l}")));
    }
    out.join("\n")
}

pub fn junit(results: &RunResults) -> String {
    let meta = &results.meta;
    let mut report = Report::new(meta.spec_name.as_str());
    report.set_time(seconds(meta.seconds));
    let started = chrono::DateTime::parse_from_rfc3339(&meta.started).ok();
    if let Some(t) = started {
        report.set_timestamp(t);
    }
    let mut suites: IndexMap<&str, Vec<&JobRecord>> = IndexMap::new();
    // A job another shard (or filter) selected is reported there, once.
    for job in results.jobs.iter().filter(|j| !j.dependency) {
        suites.entry(job.model.as_str()).or_default().push(job);
    }
    for (model, jobs) in suites {
        let mut suite = TestSuite::new(model);
        if let Some(t) = started {
            suite.set_timestamp(t);
        }
        suite.set_time(seconds(jobs.iter().map(|j| j.seconds.max(0.0)).sum()));
        let props = [
            ("spec", meta.spec.clone()),
            ("spec_hash", meta.spec_hash.clone()),
            ("git_commit", meta.git_commit.clone().unwrap_or_default()),
            ("host", meta.host.clone()),
            ("backend", meta.backend.clone()),
            ("device", meta.device.clone()),
            ("seed", meta.seed.to_string()),
            ("meshparity_version", meta.meshparity_version.clone()),
            ("started", meta.started.clone()),
        ];
        // A value not known (no repository, no commit) is left out, not written empty.
        suite.add_properties(
            props
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| Property::new(k, v)),
        );
        let skipped = jobs
            .iter()
            .filter(|j| matches!(j.status, Status::Skipped | Status::NotRun))
            .count();
        suite
            .extra
            .insert("skipped".into(), skipped.to_string().into());
        for job in jobs {
            suite.add_test_case(test_case(meta, job));
        }
        // quick-junit counts skipped cases as disabled too; `skipped` above says it.
        suite.disabled = 0;
        report.add_test_suite(suite);
    }
    crate::chars::xml_safe(
        report
            .to_string()
            .expect("a JUnit report serializes to a string"),
    )
}

/// A job as a JUnit test case: its status, time, properties and the last attempt's log.
fn test_case(meta: &RunMeta, job: &JobRecord) -> TestCase {
    let (class, name) = case_names(&meta.spec_name, job);
    let mut case = TestCase::new(name, status(job));
    case.set_classname(class);
    case.set_time(seconds(job.seconds));
    case.extra.insert("file".into(), meta.spec.as_str().into());
    case.add_property(Property::new("job_id", job.id.as_str()));
    case.add_property(Property::new("world_size", job.world_size.to_string()));
    case.add_property(Property::new("device", job.device.as_str()));
    if !job.adapter.is_empty() {
        case.add_property(Property::new("adapter", job.adapter.as_str()));
    }
    if let Some(n) = compared(job) {
        case.add_property(Property::new("compared", n.to_string()));
    }
    if let Some(n) = job.detail.as_ref().and_then(|d| d.collectives()) {
        case.add_property(Property::new("collectives", n.to_string()));
    }
    if let Some(b) = job.detail.as_ref().and_then(|d| d.activation_bytes()) {
        case.add_property(Property::new("activation_bytes", b.to_string()));
    }
    if !job.reproduce.is_empty() {
        case.add_property(Property::new("reproduce", job.reproduce.as_str()));
    }
    if let Some(last) = job.attempts.last().filter(|a| !a.log_tail.is_empty()) {
        case.set_system_out(last.log_tail.as_str());
    }
    case
}

/// Tensors or points a job's comparisons covered.
pub fn compared(job: &JobRecord) -> Option<u64> {
    match job.detail.as_ref()? {
        Finding::Level(o) => Some(o.comparisons.iter().map(|c| c.compared).sum()),
        _ => None,
    }
}

/// A results file's seconds as a duration: negative or NaN as zero, too large as the largest
/// (a hand-edited `1e308` must not abort the report).
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}
