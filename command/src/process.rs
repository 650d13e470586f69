//! Running the program: the rendered argv (or `sh -c` line), its environment and working
//! directory; its output kept within bounds in `program.log` beside the artifacts, the first of
//! it passed on to this worker's stderr ([`crate::output`]).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::output::{pump, BoundedLog, Caps};

/// The log the program's stdout and stderr go to, in its output directory.
pub const LOG: &str = "program.log";

/// What to run.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// Its own time limit, before the process's ([`set_time_limit`]).
    pub limit: Option<Duration>,
}

impl Invocation {
    /// The argv as one line people can paste (each word shell-quoted).
    pub fn display(&self) -> String {
        self.argv
            .iter()
            .map(|w| crate::template::shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Why the program did not finish well.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("cannot start `{argv}` in {cwd}: {source}")]
    Spawn {
        argv: String,
        cwd: String,
        source: std::io::Error,
    },
    /// `cause`: what its output says went wrong ([`crate::cause::excerpt`]), its first line
    /// on the error's first line (the one a job's summary shows), before a long command.
    #[error("the program {how}; {cause}\ncommand: `{argv}`")]
    Failed {
        argv: String,
        how: String,
        cause: String,
    },
    #[error("the program ran past its time limit of {seconds} s and was ended; {cause}\ncommand: `{argv}`")]
    TimedOut {
        argv: String,
        seconds: f64,
        cause: String,
    },
    #[error("writing {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// The programs of this process still running. `calibrate` runs several in one process, on
/// its threads: ending what one program left behind must spare the others and all below them
/// (it killed every descendant, and with it the neighbouring seeds' programs: "killed by
/// signal 9" with no output). The lock is held from a spawn to its registration, and through
/// the ending, so no program is between the two when another's strays are ended.
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<i32>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The time limit of every program this process runs, in milliseconds (0: none). `run`'s
/// workers need none (the runner ends a worker past its job's limit, and the program with it);
/// `calibrate` runs programs in its own process and sets one (`--timeout`), or a hung program
/// held the sweep forever.
static TIME_LIMIT_MS: AtomicU64 = AtomicU64::new(0);

/// Set (or with `None` clear) the time limit of every program this process runs from now on.
pub fn set_time_limit(limit: Option<Duration>) {
    let ms = limit.map_or(0, |d| d.as_millis().clamp(1, u64::MAX as u128) as u64);
    TIME_LIMIT_MS.store(ms, Ordering::Relaxed);
}

fn time_limit() -> Option<Duration> {
    match TIME_LIMIT_MS.load(Ordering::Relaxed) {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    }
}

/// A watchdog that ends `pid` and everything below it at `limit` unless dropped first.
struct Watchdog {
    stop: Option<mpsc::Sender<()>>,
    fired: Arc<AtomicBool>,
}

impl Watchdog {
    fn start(pid: i32, limit: Option<Duration>) -> Watchdog {
        let fired = Arc::new(AtomicBool::new(false));
        let Some(limit) = limit else {
            return Watchdog { stop: None, fired };
        };
        let (stop, wait) = mpsc::channel::<()>();
        let flag = Arc::clone(&fired);
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                flag.store(true, Ordering::SeqCst);
                meshparity_procs::kill_tree(pid, None);
                // SAFETY: a signal to the program's own process id, not yet reaped (its
                // runner's thread waits for it).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        });
        Watchdog {
            stop: Some(stop),
            fired,
        }
    }

    /// Stop watching; whether the limit had been reached.
    fn finish(mut self) -> bool {
        drop(self.stop.take());
        self.fired.load(Ordering::SeqCst)
    }
}

/// Run `inv` to completion, its output logged into `out`.
pub fn run(inv: &Invocation, out: &Path) -> Result<(), ProcessError> {
    let log_path = out.join(LOG);
    let caps = Caps::default();
    let log = BoundedLog::create(&log_path, caps).map_err(|source| ProcessError::Io {
        path: log_path.display().to_string(),
        source,
    })?;
    let log = Arc::new(Mutex::new(log));
    if crate::output::forwarding() {
        eprintln!("meshparity: running {}", inv.display());
    }
    let mut child = spawn(inv)?;
    let pid = child.id() as i32;
    let pumps: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|stream| {
        let log = Arc::clone(&log);
        std::thread::spawn(move || pump(stream, &log, caps))
    })
    .collect();
    let limit = inv.limit.or_else(time_limit);
    let watchdog = Watchdog::start(pid, limit);
    let status = child.wait().map_err(|source| ProcessError::Spawn {
        argv: inv.display(),
        cwd: inv.cwd.display().to_string(),
        source,
    });
    let timed_out = watchdog.finish();
    // The program is judged when it exits: what it left running (a background child holding
    // its output open, one in a session of its own) ends now, and its pipes close with it —
    // sparing the other programs this process runs ([`LIVE`]).
    {
        let mut running = live();
        running.retain(|p| *p != pid);
        let others = running.clone();
        meshparity_procs::kill_tree(std::process::id() as i32, Some(&|p| others.contains(&p)));
    }
    let status = status?;
    for p in pumps {
        let _ = p.join();
    }
    // Both pumps are joined: the log is this thread's alone (a pump that panicked poisoned
    // it, and its lines so far are what there is).
    if let Ok(log) = Arc::try_unwrap(log) {
        let log = log
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        log.finish().map_err(|source| ProcessError::Io {
            path: log_path.display().to_string(),
            source,
        })?;
    }
    if timed_out {
        return Err(ProcessError::TimedOut {
            argv: inv.display(),
            seconds: limit.map_or(0.0, |d| d.as_secs_f64()),
            cause: crate::cause::excerpt(&log_path),
        });
    }
    judged(inv, status, &log_path)
}

/// `inv`'s program started in its own setup ([`meshparity_procs::child_setup`]), its output
/// piped, and counted among the programs this process runs ([`LIVE`]).
fn spawn(inv: &Invocation) -> Result<std::process::Child, ProcessError> {
    let mut command = Command::new(&inv.argv[0]);
    // SAFETY: child_setup makes only async-signal-safe calls, as pre_exec requires.
    unsafe {
        command.pre_exec(|| meshparity_procs::child_setup());
    }
    let mut running = live();
    let child = command
        .args(&inv.argv[1..])
        .envs(inv.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&inv.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ProcessError::Spawn {
            argv: inv.display(),
            cwd: inv.cwd.display().to_string(),
            source,
        })?;
    running.push(child.id() as i32);
    Ok(child)
}

/// A program that exited by itself: `Ok` on success, else how it ended and its log's excerpt.
fn judged(
    inv: &Invocation,
    status: std::process::ExitStatus,
    log_path: &Path,
) -> Result<(), ProcessError> {
    if status.success() {
        return Ok(());
    }
    let how = match status.code() {
        Some(code) => format!("exited with {code}"),
        None => {
            use std::os::unix::process::ExitStatusExt;
            format!("was killed by signal {}", status.signal().unwrap_or(0))
        }
    };
    Err(ProcessError::Failed {
        argv: inv.display(),
        how,
        cause: crate::cause::excerpt(log_path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(line: &str, cwd: &Path) -> Invocation {
        Invocation {
            argv: vec!["sh".into(), "-c".into(), line.into()],
            env: Vec::new(),
            cwd: cwd.to_path_buf(),
            limit: None,
        }
    }

    /// Two programs at once in one process (as calibrate runs them): the first to end does
    /// not end the other.
    #[test]
    fn a_program_ending_spares_its_neighbours() {
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let (slow, fast) = (dirs[0].path().to_path_buf(), dirs[1].path().to_path_buf());
        let long = std::thread::spawn(move || run(&sh("sleep 1.5; echo done", &slow), &slow));
        std::thread::sleep(std::time::Duration::from_millis(300));
        run(&sh("true", &fast), &fast).unwrap();
        long.join().unwrap().unwrap();
        let log = std::fs::read_to_string(dirs[0].path().join(LOG)).unwrap();
        assert!(log.contains("done"), "{log}");
    }

    /// A program past the time limit is ended with what it forked, and said to have timed out.
    #[test]
    fn a_program_past_its_time_limit_is_ended() {
        let dir = tempfile::tempdir().unwrap();
        let inv = Invocation {
            limit: Some(Duration::from_millis(300)),
            ..sh("echo started; sleep 30 & sleep 30", dir.path())
        };
        let start = std::time::Instant::now();
        let e = run(&inv, dir.path()).unwrap_err().to_string();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert!(e.contains("time limit of 0.3 s"), "{e}");
    }
}
