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
    pub detail: Option<meshparity_engine::Finding>,
    pub cached: bool,
    /// The adapter the worker computed on.
    pub adapter: String,
}

impl Verdict {
    fn infra(status: Status, summary: String) -> Self {
        Self {
            status,
            summary,
            detail: None,
            cached: false,
            adapter: String::new(),
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
        (Ending::SpawnFailed(e) | Ending::Infra(e), _) => Verdict::infra(Status::Error, e.clone()),
        (Ending::Cancelled, _) => Verdict::infra(
            Status::NotRun,
            "not run: cancelled while running (interrupted, or the run stopped after failures)"
                .into(),
        ),
    }
}

/// The worker's last `error:` line on stderr (its panic hook writes one), else the last
/// non-empty line.
fn last_error_line(f: &Finished) -> Option<String> {
    // The worker writes its error last: the end of its log holds it.
    let lines = meshparity_files::tail(&f.stderr, 200);
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
