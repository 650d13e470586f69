//! Served attempts: a job of the built-in engine runs in a long-lived worker process
//! (`meshparity serve`) that keeps its process, its heap and its compute threads across jobs —
//! and on a GPU its device, burn's compute client and the kernels it compiled. In a process of
//! its own each job paid a start and its memory faulted in again (the quickstart: 5.5 of its
//! 11.3 CPU seconds in the kernel, docs/performance.md), and on a GPU the device's setup and
//! every kernel's compilation: ~5 s a job on an H200; on Mesa's software adapter the
//! quickstart's dp2·tp2·pp2 cells took 322 s that way and 203 s served (docs/backend.md).
//!
//! Isolation holds where it matters: one job runs in a server at a time, in its own logs; a job
//! that panics or crashes ends its server (the exit status is the attempt's, as for a worker of
//! its own), a timeout or a cancellation ends the server's whole process group, and the next
//! job starts a new server. A server that died while idle is replaced before its request is
//! lost. Servers are children of the runner like workers (their own process group, the
//! parent-death signal, spared by [`child::end_strays`] while they live) and are killed when the
//! run's executor goes.
//!
//! The protocol (src/cli/serve.rs): one request per line on the server's stdin — the worker's
//! arguments as a JSON array — and one reply per line on its stdout, `{"exit":CODE}`.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use super::Launch;
use crate::exec::child::{self, Ending, Finished, Live};
use crate::exec::launch_error::LaunchError;

/// Idle servers, ready for the next served job.
#[derive(Clone)]
pub struct Served {
    exe: PathBuf,
    /// The run's directory, on each server's command line: a run's processes are told apart
    /// by theirs, as its workers' are (`ps`, the tests' stray checks).
    run_dir: PathBuf,
    grace: Duration,
    idle: Arc<Mutex<Vec<Server>>>,
}

/// One `meshparity serve` process and its protocol pipes.
struct Server {
    child: Child,
    pgid: Option<i32>,
    requests: ChildStdin,
    replies: BufReader<ChildStdout>,
    /// Spared by the stray sweep while it lives.
    _live: Option<Live>,
}

impl Served {
    pub fn new(exe: PathBuf, run_dir: PathBuf, grace: Duration) -> Self {
        Self {
            exe,
            run_dir,
            grace,
            idle: Arc::default(),
        }
    }

    /// Run `l` in an idle server (or a new one), ended by its timeout or by `cancel` as a
    /// worker of its own would be.
    pub async fn run(&self, l: Launch, mut cancel: watch::Receiver<u8>) -> Finished {
        let start = Instant::now();
        let finished = |ending| Finished {
            ending,
            seconds: start.elapsed().as_secs_f64(),
            stdout: l.dir.join("stdout.log"),
            stderr: l.dir.join("stderr.log"),
        };
        if let Err(e) = child::create_logs(&l.dir) {
            return finished(Ending::spawn_failed(e));
        }
        if *cancel.borrow() > 0 {
            return finished(Ending::Cancelled);
        }
        let mut server = match self.hand(&l.args).await {
            Ok(s) => s,
            Err(e) => return finished(Ending::spawn_failed(e)),
        };
        let mut line = String::new();
        enum Wake {
            Reply(std::io::Result<usize>),
            Timeout,
            Cancel,
        }
        let mut watcher = cancel.clone();
        let wake = tokio::select! {
            r = server.replies.read_line(&mut line) => Wake::Reply(r),
            _ = tokio::time::sleep(l.timeout) => Wake::Timeout,
            r = watcher.wait_for(|c| *c > 0) => {
                drop(r);
                Wake::Cancel
            }
        };
        let ending = match wake {
            Wake::Reply(Ok(n)) if n > 0 => match exit_code(&line) {
                Some(code) => {
                    self.park(server);
                    return finished(Ending::Exited(ExitStatus::from_raw(code << 8)));
                }
                None => {
                    child::end_group(&mut server.child, server.pgid, Duration::ZERO).await;
                    Ending::spawn_failed(LaunchError::Answer(format!(
                        "the serving worker answered `{}`, not an exit code",
                        line.trim()
                    )))
                }
            },
            // No reply: the job ended its server (a panic, a crash, an abort), whose status is
            // the attempt's.
            Wake::Reply(_) => match tokio::time::timeout(self.grace, server.child.wait()).await {
                Ok(Ok(status)) => Ending::Exited(status),
                Ok(Err(e)) => {
                    Ending::spawn_failed(LaunchError::process("waiting for the serving worker")(e))
                }
                Err(_) => {
                    child::end_group(&mut server.child, server.pgid, Duration::ZERO).await;
                    Ending::spawn_failed(LaunchError::Answer(
                        "the serving worker closed its replies but lived".into(),
                    ))
                }
            },
            Wake::Timeout => {
                child::end_group(&mut server.child, server.pgid, self.grace).await;
                Ending::TimedOut
            }
            Wake::Cancel => {
                let now = *cancel.borrow() > 1;
                let grace = if now { Duration::ZERO } else { self.grace };
                child::end_group_watching(&mut server.child, server.pgid, grace, &mut cancel).await;
                Ending::Cancelled
            }
        };
        if let Some(g) = server.pgid {
            child::signal_group(g, libc::SIGKILL);
        }
        drop(server);
        child::end_strays();
        finished(ending)
    }

    /// A server that took the request `args`: an idle one, or a new one when there is none or
    /// the idle one had died (its pipe is closed).
    async fn hand(&self, args: &[String]) -> Result<Server, LaunchError> {
        let mut request = serde_json::to_string(args)?;
        request.push('\n');
        loop {
            let idle = self.idle.lock().ok().and_then(|mut i| i.pop());
            let (fresh, mut server) = match idle {
                Some(s) => (false, s),
                None => (true, self.start()?),
            };
            let sent = async {
                server.requests.write_all(request.as_bytes()).await?;
                server.requests.flush().await
            };
            match sent.await {
                Ok(()) => return Ok(server),
                Err(e) if fresh => {
                    child::end_group(&mut server.child, server.pgid, Duration::ZERO).await;
                    return Err(LaunchError::process("starting a serving worker")(e));
                }
                Err(_) => {
                    child::end_group(&mut server.child, server.pgid, Duration::ZERO).await;
                }
            }
        }
    }

    fn start(&self) -> Result<Server, LaunchError> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(["serve", "--grace", &self.grace.as_secs_f64().to_string()])
            .arg("--run-dir")
            .arg(&self.run_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // A job's output goes to its own logs; between jobs the server writes nothing.
            .stderr(Stdio::null())
            .process_group(0)
            .env(crate::worker::PARENT_ENV, std::process::id().to_string())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(LaunchError::process(format!(
            "spawning {} serve",
            self.exe.display()
        )))?;
        let pgid = child.id().map(|p| p as i32);
        let (Some(requests), Some(replies)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(LaunchError::Answer(
                "a serving worker without its pipes".into(),
            ));
        };
        Ok(Server {
            child,
            pgid,
            requests,
            replies: BufReader::new(replies),
            _live: pgid.map(Live::new),
        })
    }

    fn park(&self, server: Server) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(server);
        }
    }
}

/// The code in a reply line `{"exit":CODE}`.
fn exit_code(line: &str) -> Option<i32> {
    let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    v.get("exit")?
        .as_u64()
        .and_then(|c| i32::try_from(c).ok())
        .filter(|c| *c <= 255)
}

#[cfg(test)]
mod tests {
    use super::exit_code;

    #[test]
    fn a_reply_names_an_exit_code_or_is_refused() {
        assert_eq!(exit_code("{\"exit\":1}\n"), Some(1));
        assert_eq!(exit_code("{\"exit\":256}"), None);
        assert_eq!(exit_code("passed: ok"), None);
    }
}
