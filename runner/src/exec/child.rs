//! One worker process: spawned in its own process group, logs to files, ended by a timeout or
//! a cancellation with SIGTERM to the whole group and SIGKILL after a grace period.
//!
//! The child asks the kernel to signal it if the runner dies (PR_SET_PDEATHSIG, set by the
//! worker itself as it starts, see [`meshparity_procs::guard`]) and then ends every process it
//! started, so even a `kill -9` of the runner leaves no job process behind. The runner is a
//! subreaper: what an ended worker's processes left outside its group comes back here and is
//! ended with the attempt ([`meshparity_procs::end_strays`]). The runner spawns from one thread (a current-thread
//! runtime), which is what the death signal is tied to. No code runs between fork and exec, so
//! the standard library can use `posix_spawn`: forking a runner that holds a 100,000-job plan
//! cost milliseconds per job.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::exec::launch_error::LaunchError;

/// How a process ended.
#[derive(Clone, Debug)]
pub enum Ending {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
    /// Not started, or lost track of (shared: an ending is cloned into the job's record).
    SpawnFailed(std::sync::Arc<LaunchError>),
    /// Ended by the infrastructure, not by itself: a cluster's node failure, preemption, out
    /// of memory, lost job; with what happened.
    Infra(String),
}

impl Ending {
    pub fn spawn_failed(e: LaunchError) -> Ending {
        Ending::SpawnFailed(std::sync::Arc::new(e))
    }
}

/// What ran and how it ended.
#[derive(Clone, Debug)]
pub struct Finished {
    pub ending: Ending,
    pub seconds: f64,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl Finished {
    /// `0`, `1`, `signal 6`, ...
    pub fn exit_text(&self) -> Option<String> {
        match &self.ending {
            Ending::Exited(s) => Some(match (s.code(), s.signal()) {
                (Some(c), _) => c.to_string(),
                (None, Some(sig)) => format!("signal {sig}"),
                _ => "unknown".into(),
            }),
            _ => None,
        }
    }

    /// The last lines of stderr and stdout, for error reports.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        for (label, path) in [("stderr", &self.stderr), ("stdout", &self.stdout)] {
            let last = meshparity_files::tail(path, lines);
            if last.is_empty() {
                continue;
            }
            out.push_str(&format!("--- {label} (last {} lines) ---\n", last.len()));
            for l in &last {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

/// Launch `exe args` with logs in `dir`, wait for it under `timeout`, and end its group on
/// timeout or when `cancel` turns true (`true` twice: no grace).
pub async fn run(
    exe: &Path,
    args: &[String],
    dir: &Path,
    timeout: Duration,
    grace: Duration,
    mut cancel: watch::Receiver<u8>,
) -> Finished {
    let start = Instant::now();
    let finished = |ending| Finished {
        ending,
        seconds: start.elapsed().as_secs_f64(),
        stdout: dir.join("stdout.log"),
        stderr: dir.join("stderr.log"),
    };
    let mut child = match spawn(exe, args, dir) {
        Ok(c) => c,
        Err(e) => return finished(Ending::spawn_failed(e)),
    };
    let pgid = child.id().map(|p| p as i32);
    let _live = pgid.map(Live::new);
    if *cancel.borrow() > 0 {
        end_group(&mut child, pgid, Duration::ZERO).await;
        return finished(Ending::Cancelled);
    }
    enum Wake {
        Exited(std::io::Result<ExitStatus>),
        Timeout,
        Cancel,
    }
    let mut watcher = cancel.clone();
    let wake = tokio::select! {
        status = child.wait() => Wake::Exited(status),
        _ = tokio::time::sleep(timeout) => Wake::Timeout,
        r = watcher.wait_for(|c| *c > 0) => {
            drop(r);
            Wake::Cancel
        }
    };
    let ending = match wake {
        Wake::Exited(Ok(s)) => Ending::Exited(s),
        Wake::Exited(Err(e)) => {
            Ending::spawn_failed(LaunchError::process("waiting for the worker")(e))
        }
        Wake::Timeout => {
            end_group(&mut child, pgid, grace).await;
            Ending::TimedOut
        }
        Wake::Cancel => {
            let now = *cancel.borrow() > 1;
            end_group_watching(
                &mut child,
                pgid,
                if now { Duration::ZERO } else { grace },
                &mut cancel,
            )
            .await;
            Ending::Cancelled
        }
    };
    // Whatever the worker left behind in its group goes too, and what left the group (a new
    // session) came back to this subreaper when the worker died: it goes, live workers spared.
    if let Some(g) = pgid {
        signal_group(g, libc::SIGKILL);
    }
    drop(_live);
    end_strays();
    finished(ending)
}

/// `exe args` in a process group of its own, its output into `dir`'s new logs.
fn spawn(exe: &Path, args: &[String], dir: &Path) -> Result<Child, LaunchError> {
    let (out, err) = create_logs(dir)?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0)
        .env(crate::worker::PARENT_ENV, std::process::id().to_string())
        .kill_on_drop(true);
    cmd.spawn()
        .map_err(LaunchError::process(format!("spawning {}", exe.display())))
}

/// End what ended attempts left behind, live workers (and idle serving ones) spared.
pub(super) fn end_strays() {
    let live = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
    meshparity_procs::end_strays(&|p| live.contains(&p));
}

/// `dir/stdout.log` and `dir/stderr.log`, new and empty: an attempt's logs.
pub(super) fn create_logs(dir: &Path) -> Result<(std::fs::File, std::fs::File), LaunchError> {
    let files = std::fs::create_dir_all(dir).and_then(|_| {
        Ok((
            std::fs::File::create(dir.join("stdout.log"))?,
            std::fs::File::create(dir.join("stderr.log"))?,
        ))
    });
    files.map_err(LaunchError::io("creating logs in", dir))
}

/// Workers running now, by pid: spared when what an ended attempt left behind is killed.
static LIVE: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// A worker in [`LIVE`] while this lives.
pub(super) struct Live(i32);

impl Live {
    pub(super) fn new(pid: i32) -> Self {
        if let Ok(mut l) = LIVE.lock() {
            l.push(pid);
        }
        Live(pid)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Ok(mut l) = LIVE.lock() {
            l.retain(|p| *p != self.0);
        }
    }
}

pub(super) fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// SIGTERM to the group, SIGKILL after `grace` if it is still there.
pub(super) async fn end_group(child: &mut Child, pgid: Option<i32>, grace: Duration) {
    let Some(g) = pgid else { return };
    if grace.is_zero() {
        signal_group(g, libc::SIGKILL);
    } else {
        signal_group(g, libc::SIGTERM);
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            signal_group(g, libc::SIGKILL);
        }
    }
    let _ = child.wait().await;
}

/// As `end_group`, but a second cancellation during the grace period kills at once.
pub(super) async fn end_group_watching(
    child: &mut Child,
    pgid: Option<i32>,
    grace: Duration,
    cancel: &mut watch::Receiver<u8>,
) {
    let Some(g) = pgid else { return };
    if grace.is_zero() {
        signal_group(g, libc::SIGKILL);
    } else {
        signal_group(g, libc::SIGTERM);
        let exited = tokio::select! {
            _ = child.wait() => true,
            _ = tokio::time::sleep(grace) => false,
            r = cancel.wait_for(|c| *c > 1) => {
                drop(r);
                false
            }
        };
        if !exited {
            signal_group(g, libc::SIGKILL);
        }
    }
    let _ = child.wait().await;
}
