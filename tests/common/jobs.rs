//! A run's job processes seen from outside, as the tests that interrupt, kill or fault a run
//! look for them: a worker of its own (`meshparity worker … --out RUN/jobs/…`) or a worker
//! serving many (`meshparity serve --run-dir RUN`), both with the run's directory on their
//! command line.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Processes whose command line mentions `needle` (our job processes carry the run dir: a
/// worker of its own, or a worker serving many, `meshparity serve --run-dir DIR`).
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = super::harness::processes_with(needle);
    found.retain(|c| is_job_process(c));
    found
}

fn is_job_process(cmd: &str) -> bool {
    cmd.contains(" worker ") || cmd.contains(" serve ")
}

/// Whether the job whose directory's name holds `job` has started: its attempt's log has its
/// first line (a served job's "served: job K …", a worker's own command line otherwise).
pub fn started(run_dir: &Path, job: &str) -> bool {
    let Ok(dirs) = std::fs::read_dir(run_dir.join("jobs")) else {
        return false;
    };
    dirs.flatten()
        .filter(|d| d.file_name().to_string_lossy().contains(job))
        .any(|d| {
            let log = d.path().join("attempt-1").join("stdout.log");
            std::fs::metadata(log).is_ok_and(|m| m.len() > 0)
        })
        || !processes_mentioning(job).is_empty()
}

/// Whether a job process whose command line holds `needle` ignores SIGTERM already (its fault
/// set it): an interrupt sent before then would end it like any job.
pub fn ignores_sigterm(needle: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let ignored = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .unwrap_or(0);
        cmd.contains(needle) && is_job_process(&cmd) && ignored & (1 << (libc::SIGTERM - 1)) != 0
    })
}

pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How many jobs each serving worker (by pid) ran, from the "served: job K of worker process
/// PID" line each served job's log starts with.
pub fn servers(run_dir: &Path) -> BTreeMap<u32, usize> {
    let mut by = BTreeMap::new();
    for d in std::fs::read_dir(run_dir.join("jobs")).unwrap().flatten() {
        for a in std::fs::read_dir(d.path()).unwrap().flatten() {
            let log = std::fs::read_to_string(a.path().join("stdout.log")).unwrap_or_default();
            if let Some(pid) = log
                .lines()
                .find_map(|l| l.strip_prefix("served: job "))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|p| p.parse().ok())
            {
                *by.entry(pid).or_insert(0) += 1;
            }
        }
    }
    by
}
