//! What an attempt's ending means: the worker's own verdict when it wrote one and exited
//! normally, else an error (crash, bad exit, no result), a timeout, or not run (cancelled).

use std::path::Path;
use std::time::Duration;

use meshparity_reports::Status;

use super::child::{Ending, Finished};
use crate::worker::{WorkerResult, RESULT_FILE};

pub struct Verdict {
    pub status: Status,
    pub summary: String,
    pub detail: Option<meshparity_judge::Finding>,
    pub cached: bool,
    /// The adapter the worker computed on.
    pub adapter: String,
    /// What shrinking the failure took of the attempt's time.
    pub shrink_seconds: f64,
}

impl Verdict {
    fn infra(status: Status, summary: String) -> Self {
        Self {
            status,
            summary,
            detail: None,
            cached: false,
            adapter: String::new(),
            shrink_seconds: 0.0,
        }
    }
}

/// Judge an attempt that ran in `dir` under `timeout`.
pub fn verdict(f: &Finished, dir: &Path, timeout: Duration) -> Verdict {
    let result: Option<WorkerResult> = std::fs::read(dir.join(RESULT_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    match (&f.ending, result) {
        (Ending::Exited(s), Some(r)) if matches!(s.code(), Some(0 | 1)) => Verdict {
            status: r.status,
            summary: r.summary,
            detail: r.detail,
            cached: r.cached,
            adapter: r.adapter,
            shrink_seconds: r.shrink_seconds,
        },
        (Ending::Exited(_), _) => {
            let why = last_error_line(f).unwrap_or_else(|| "no result file".into());
            let exit = f.exit_text().unwrap_or_default();
            Verdict::infra(Status::Error, format!("worker exited with {exit}: {why}"))
        }
        (Ending::TimedOut, _) => Verdict::infra(
            Status::Timeout,
            format!("timed out after {}s", timeout.as_secs_f64()),
        ),
        (Ending::SpawnFailed(e), _) => Verdict::infra(Status::Error, e.to_string()),
        (Ending::Infra(e), _) => Verdict::infra(Status::Error, e.clone()),
        (Ending::Cancelled, _) => Verdict::infra(
            Status::NotRun,
            "not run: cancelled while running (interrupted, or the run stopped after failures)"
                .into(),
        ),
    }
}

/// The worker's last `error:` line on stderr (its panic hook writes one), else the last
/// non-empty line. An allocation failure is named as such: Rust prints `memory allocation of N
/// bytes failed` and aborts, and the last line was a panic hook's backtrace note.
fn last_error_line(f: &Finished) -> Option<String> {
    // The worker writes its error last: the end of its log holds it.
    let lines = meshparity_files::tail(&f.stderr, 200);
    if let Some(oom) = lines
        .iter()
        .rev()
        .find(|l| l.contains("memory allocation of") && l.contains("failed"))
    {
        return Some(format!(
            "out of memory: {} (the job needs more memory than this process may use: its \
             address-space or cgroup limit, or the machine's; a smaller model, batch or mesh \
             needs less)",
            oom.trim().chars().take(200).collect::<String>()
        ));
    }
    let line = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("error: "))
        .or(lines.last())?;
    Some(
        line.trim_start_matches("error: ")
            .chars()
            .take(300)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    /// A worker that aborted on an allocation is named out of memory, not by its last line
    /// (a panic hook's note).
    #[test]
    fn an_allocation_failure_is_named_out_of_memory() {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr.log");
        std::fs::write(
            &stderr,
            "memory allocation of 1073741824 bytes failed\nnote: run with `RUST_BACKTRACE=1`\n",
        )
        .unwrap();
        let f = Finished {
            ending: Ending::Exited(std::process::ExitStatus::from_raw(libc::SIGABRT)),
            seconds: 1.0,
            stdout: dir.path().join("stdout.log"),
            stderr,
        };
        let v = verdict(&f, dir.path(), Duration::from_secs(1));
        assert_eq!(v.status, Status::Error);
        assert!(
            v.summary
                .contains("signal 6: out of memory: memory allocation of 1073741824 bytes"),
            "{}",
            v.summary
        );
    }
}
