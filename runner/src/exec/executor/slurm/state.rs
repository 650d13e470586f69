//! Slurm job states, read in batches, and what each means for an attempt.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use tokio::process::Command;

use crate::exec::child::Ending;

/// The worker's exit code, written by the batch script into the attempt directory and read here
/// when the job ends.
pub const EXIT_FILE: &str = "exit-code";

/// Ids per `squeue`/`sacct`/`scancel` call, to keep command lines short.
const CHUNK: usize = 200;

#[derive(Clone, Debug, PartialEq)]
pub enum JobState {
    /// Submitted, not started (PENDING, CONFIGURING, REQUEUED, SUSPENDED…).
    Pending,
    /// Started, not finished (RUNNING, COMPLETING: not done until its files are).
    Running,
    Completed,
    Failed,
    Timeout,
    Cancelled,
    /// The cluster, not the job, ended it: NODE_FAIL, PREEMPTED, BOOT_FAIL, OUT_OF_MEMORY,
    /// DEADLINE.
    Infra(String),
    /// Neither `squeue` nor `sacct` knows the id.
    Unknown,
}

impl JobState {
    pub fn parse(s: &str) -> JobState {
        // `CANCELLED by 0` in sacct.
        match s.split_whitespace().next().unwrap_or("") {
            "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED"
            | "RESV_DEL_HOLD" | "SUSPENDED" | "STOPPED" | "SPECIAL_EXIT" | "RESIZING" => {
                JobState::Pending
            }
            "RUNNING" | "COMPLETING" | "SIGNALING" | "STAGE_OUT" => JobState::Running,
            "COMPLETED" => JobState::Completed,
            "FAILED" => JobState::Failed,
            "TIMEOUT" => JobState::Timeout,
            "CANCELLED" | "REVOKED" => JobState::Cancelled,
            other => JobState::Infra(other.to_owned()),
        }
    }

    pub fn is_terminal(&self) -> bool {
        !matches!(self, JobState::Pending | JobState::Running)
    }
}

/// The state of each of `ids` Slurm knows: `squeue -t all` (recent jobs), then `sacct` (the
/// accounting database) and `sacct -c` (the completion log) for those that aged out of it.
/// An id is [`JobState::Unknown`] only when squeue answered and said so ("Invalid job id");
/// a controller that does not answer leaves the jobs as they were, to be asked again.
pub async fn query(ids: &[String]) -> HashMap<String, JobState> {
    let mut out = HashMap::new();
    let mut answered = true;
    for chunk in ids.chunks(CHUNK) {
        let list = chunk.join(",");
        match run("squeue", &["-h", "-t", "all", "-j", &list, "-o", "%i|%T"]).await {
            Ok(text) => parse_lines(&text, &mut out),
            // squeue fails when every id of the chunk is unknown to it.
            Err(why) => answered &= why.contains("Invalid job id"),
        }
    }
    for accounting in [&["-P", "-n", "-X"][..], &["-c", "-P", "-n"][..]] {
        let missing: Vec<String> = ids
            .iter()
            .filter(|i| !out.contains_key(*i))
            .cloned()
            .collect();
        for chunk in missing.chunks(CHUNK) {
            let list = chunk.join(",");
            let mut args = accounting.to_vec();
            args.extend(["-j", &list, "-o", "JobID,State"]);
            if let Ok(text) = run("sacct", &args).await {
                parse_lines(&text, &mut out);
            }
        }
    }
    if answered {
        for id in ids {
            out.entry(id.clone()).or_insert(JobState::Unknown);
        }
    }
    out
}

fn parse_lines(text: &str, out: &mut HashMap<String, JobState>) {
    for line in text.lines() {
        let mut parts = line.split('|');
        let (Some(id), Some(state)) = (parts.next(), parts.next()) else {
            continue;
        };
        // Job steps (`12.batch`) are not jobs.
        if id.contains('.') {
            continue;
        }
        out.insert(id.trim().to_owned(), JobState::parse(state.trim()));
    }
}

/// Cancel `ids` (no error when they already ended).
pub async fn scancel(ids: &[String]) {
    for chunk in ids.chunks(CHUNK) {
        let _ = run(
            "scancel",
            &chunk.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .await;
    }
}

/// What a finished job's state means for its attempt in `dir`.
pub fn ending(id: &str, state: &JobState, dir: &Path, cancelled: bool) -> Ending {
    let exit = std::fs::read_to_string(dir.join(EXIT_FILE))
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok());
    match (state, exit) {
        (JobState::Completed | JobState::Failed, Some(code)) => Ending::Exited(status(code)),
        (JobState::Completed, None) => Ending::Infra(format!(
            "slurm job {id} completed but left no exit code in {}: is the run directory on a \
             file system the compute nodes share?",
            dir.display()
        )),
        (JobState::Failed, None) => Ending::Infra(format!(
            "slurm job {id} failed before the worker ended (see stderr.log: is meshparity \
             installed at the same path on the nodes?)"
        )),
        (JobState::Timeout, _) => Ending::TimedOut,
        (JobState::Cancelled, _) if cancelled => Ending::Cancelled,
        (JobState::Cancelled, _) => Ending::Infra(format!(
            "slurm job {id} was cancelled outside this run (scancel, or the cluster)"
        )),
        (JobState::Infra(what), _) => Ending::Infra(format!("slurm job {id} ended {what}")),
        (JobState::Unknown, _) => Ending::Infra(format!("slurm has no record of job {id}")),
        (JobState::Pending | JobState::Running, _) => {
            unreachable!("only terminal states end an attempt")
        }
    }
}

/// A shell exit code as the process status it stands for (128 + n: killed by signal n).
fn status(code: i32) -> ExitStatus {
    if code > 128 && code < 160 {
        ExitStatus::from_raw(code - 128)
    } else {
        ExitStatus::from_raw((code & 0xff) << 8)
    }
}

/// stdout on success; stderr (or why it could not start) otherwise.
async fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .await
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_exit_codes() {
        assert_eq!(JobState::parse("CANCELLED by 0"), JobState::Cancelled);
        assert_eq!(JobState::parse("COMPLETING"), JobState::Running);
        assert!(!JobState::parse("PENDING").is_terminal());
        assert_eq!(
            JobState::parse("NODE_FAIL"),
            JobState::Infra("NODE_FAIL".into())
        );
        assert_eq!(status(1).code(), Some(1));
        assert_eq!(status(134).signal(), Some(6));
        let mut out = HashMap::new();
        parse_lines("12|COMPLETED\n12.batch|COMPLETED\n13|TIMEOUT\n", &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out["13"], JobState::Timeout);
    }
}
