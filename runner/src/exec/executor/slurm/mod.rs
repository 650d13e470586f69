//! The Slurm executor: every attempt one batch job.
//!
//! One task owns the cluster side: it submits queued attempts with `sbatch --parsable` (at most
//! `max_pending` not yet finished at once), polls every live job with one `squeue` call per
//! `poll` interval (in chunks, never one call per job), and turns each end into a [`Done`]:
//! the worker's own exit code (written by the batch script into the attempt directory),
//! TIMEOUT, or an infrastructure end (NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, …) that the
//! scheduler may retry. A cancelled run `scancel`s every job it submitted. An attempt
//! directory that already names a Slurm job (a runner killed with -9, then `--resume`) adopts
//! that job instead of submitting it again.
//!
//! Two things do not wait for the cluster's own clocks. A job whose exit code has appeared is
//! asked about at once (a [`TICK`] later, not a `poll`): most checks end in under a second, and
//! each one's end was seen up to a poll (half a second) late. And a job's `--timeout`
//! is the runner's, counted from when `squeue` first shows it running and enforced with
//! `scancel`: Slurm keeps time limits in whole minutes and checks them every 30 s, so a 5 s
//! limit ended after 60–90 s; `--time` stays as the cluster's backstop for a runner that died.
//!
//! - `sbatch.rs` — the batch script and the submission;
//! - `state.rs` — job states from `squeue`/`sacct`, and what each means.

mod sbatch;
mod state;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;

use super::{Done, Executor, Launch};
use crate::exec::child::{Ending, Finished};
use state::JobState;

/// How often the task looks for exit codes and overdue jobs between `squeue` polls: a stat per
/// live job, cheap beside a call to the controller.
const TICK: Duration = Duration::from_millis(100);

/// Live jobs whose exit-code files are looked for every [`TICK`]; past this many (a big sweep
/// on a shared file system), only at each `squeue` poll.
const WATCHED_FILES: usize = 64;

/// How jobs are submitted: `[executor]` in the spec, or `--executor slurm` and its flags.
#[derive(Clone, Debug, PartialEq)]
pub struct SlurmConfig {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// Passed to `sbatch` as they are, after meshparity's own arguments.
    pub sbatch_args: Vec<String>,
    /// Variables set for every job, beside the environment `sbatch` exports by default.
    pub env: Vec<(String, String)>,
    /// A program that launches its own ranks gets one task per rank (one CPU or GPU each),
    /// for `srun` inside the job, instead of one task holding them all (for `torchrun`).
    pub task_per_rank: bool,
    /// Jobs submitted and not finished, at most.
    pub max_pending: usize,
    /// Between two `squeue` polls.
    pub poll: Duration,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        Self {
            partition: None,
            account: None,
            qos: None,
            sbatch_args: Vec::new(),
            env: Vec::new(),
            task_per_rank: false,
            max_pending: 500,
            poll: Duration::from_millis(500),
        }
    }
}

/// Why `dir` is probably not visible to compute nodes, if its file system says so: tmpfs, ramfs
/// and overlay (a container's) live on this machine only. Any other file system may or may not
/// be shared; a job whose exit code never appears there is reported as such.
pub fn local_only(dir: &std::path::Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    const KINDS: &[(i64, &str)] = &[
        (0x0102_1994, "tmpfs"),
        (0x8584_58f6, "ramfs"),
        (0x794c_7630, "overlayfs"),
    ];
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs fills the struct it is given; the path is a valid C string.
    let kind = unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        if libc::statfs(path.as_ptr(), &mut s) != 0 {
            return None;
        }
        s.f_type as i64
    };
    let (_, name) = KINDS.iter().find(|(magic, _)| *magic == kind)?;
    Some(format!(
        "{} is on {name}, which only this machine sees: Slurm jobs on other nodes cannot \
         write their results there (fine on a one-node cluster; otherwise use --run-dir on a \
         shared file system)",
        dir.display()
    ))
}

/// The handle the scheduler holds; the cluster work happens in the task it started.
pub struct Slurm {
    launches: UnboundedSender<Command>,
}

enum Command {
    Launch(Launch),
    WithdrawPending,
}

impl Slurm {
    pub fn start(
        config: SlurmConfig,
        exe: PathBuf,
        cancel: watch::Receiver<u8>,
        done: UnboundedSender<Done>,
    ) -> Slurm {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = Task {
            config,
            exe,
            queue: VecDeque::new(),
            live: HashMap::new(),
            cancelled: false,
            withdrawn: Default::default(),
            done,
        };
        tokio::spawn(task.drive(rx, cancel));
        Slurm { launches: tx }
    }
}

impl Executor for Slurm {
    fn launch(&mut self, launch: Launch) {
        let _ = self.launches.send(Command::Launch(launch));
    }

    fn withdraw_pending(&mut self) {
        let _ = self.launches.send(Command::WithdrawPending);
    }
}

/// A submitted attempt.
struct Live {
    launch: Launch,
    since: Instant,
    state: JobState,
    /// When `squeue` first showed it running: its timeout counts from there, not from a
    /// queue's wait.
    started: Option<Instant>,
    /// Cancelled by this runner for running past its timeout: its CANCELLED is a timeout.
    overdue: bool,
}

struct Task {
    config: SlurmConfig,
    exe: PathBuf,
    /// Waiting for room under `max_pending`.
    queue: VecDeque<Launch>,
    /// By Slurm job id.
    live: HashMap<String, Live>,
    cancelled: bool,
    /// Ids withdrawn from the queue after `--fail-fast`: their CANCELLED is ours.
    withdrawn: std::collections::HashSet<String>,
    done: UnboundedSender<Done>,
}

impl Task {
    async fn drive(
        mut self,
        mut commands: UnboundedReceiver<Command>,
        mut cancel: watch::Receiver<u8>,
    ) {
        let mut open = true;
        let mut last_poll = Instant::now();
        loop {
            tokio::select! {
                c = commands.recv(), if open => match c {
                    Some(Command::Launch(l)) => self.queue.push_back(l),
                    Some(Command::WithdrawPending) => self.withdraw_pending().await,
                    None => open = false,
                },
                changed = cancel.changed(), if !self.cancelled => {
                    let level = *cancel.borrow();
                    if changed.is_err() || level > 0 {
                        self.cancel_all().await;
                    }
                }
                _ = tokio::time::sleep(TICK.min(self.config.poll)) => {}
            }
            while let Ok(c) = commands.try_recv() {
                match c {
                    Command::Launch(l) => self.queue.push_back(l),
                    Command::WithdrawPending => self.withdraw_pending().await,
                }
            }
            self.submit_queued().await;
            if last_poll.elapsed() >= self.config.poll || self.some_exited() {
                self.poll().await;
                last_poll = Instant::now();
            }
            self.cancel_overdue().await;
            if !open && self.queue.is_empty() && self.live.is_empty() {
                return;
            }
        }
    }

    async fn submit_queued(&mut self) {
        while self.live.len() < self.config.max_pending.max(1) {
            let Some(l) = self.queue.pop_front() else {
                return;
            };
            if self.cancelled {
                self.finish(l, Instant::now(), Ending::Cancelled);
                continue;
            }
            let since = Instant::now();
            match sbatch::adopt_or_submit(&self.config, &self.exe, &l).await {
                Ok(id) => {
                    self.live.insert(
                        id,
                        Live {
                            launch: l,
                            since,
                            state: JobState::Pending,
                            started: None,
                            overdue: false,
                        },
                    );
                }
                Err(e) => self.finish(l, since, Ending::spawn_failed(e)),
            }
        }
    }

    /// One `squeue` for every live job; every job that ended becomes a [`Done`].
    async fn poll(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let ids: Vec<String> = self.live.keys().cloned().collect();
        let states = state::query(&ids).await;
        for id in ids {
            let Some(s) = states.get(&id) else { continue };
            let live = self.live.get_mut(&id).expect("polled ids are live");
            live.state = s.clone();
            if *s == JobState::Running && live.started.is_none() {
                live.started = Some(Instant::now());
            }
            if !s.is_terminal() {
                continue;
            }
            let live = self.live.remove(&id).expect("polled ids are live");
            let ours = self.cancelled || self.withdrawn.contains(&id);
            let ending = match state::ending(&id, s, &live.launch.dir, ours) {
                Ending::Cancelled | Ending::Infra(_) if live.overdue => Ending::TimedOut,
                ending => ending,
            };
            self.finish(live.launch, live.since, ending);
        }
    }

    /// Whether a live job not yet known to have ended has left its exit code: then it is
    /// ending now, and `squeue` is asked without waiting for the next poll.
    fn some_exited(&self) -> bool {
        self.live.len() <= WATCHED_FILES
            && self
                .live
                .values()
                .any(|l| !l.state.is_terminal() && l.launch.dir.join(state::EXIT_FILE).exists())
    }

    /// `scancel` every job running past its timeout (once; its end arrives through `poll`).
    async fn cancel_overdue(&mut self) {
        let overdue: Vec<String> = self
            .live
            .iter_mut()
            .filter(|(_, l)| {
                !l.overdue && l.started.is_some_and(|t| t.elapsed() > l.launch.timeout)
            })
            .map(|(id, l)| {
                l.overdue = true;
                id.clone()
            })
            .collect();
        if !overdue.is_empty() {
            state::scancel(&overdue).await;
        }
    }

    async fn cancel_all(&mut self) {
        self.cancelled = true;
        for l in std::mem::take(&mut self.queue) {
            self.finish(l, Instant::now(), Ending::Cancelled);
        }
        let ids: Vec<String> = self.live.keys().cloned().collect();
        state::scancel(&ids).await;
    }

    /// `--fail-fast`/`--max-fail` stopped the run: nothing more is wanted from the cluster,
    /// so every submitted job is cancelled, queued or running (allocations cost).
    async fn withdraw_pending(&mut self) {
        for l in std::mem::take(&mut self.queue) {
            self.finish(l, Instant::now(), Ending::Cancelled);
        }
        let live: Vec<String> = self.live.keys().cloned().collect();
        state::scancel(&live).await;
        self.withdrawn.extend(live);
    }

    fn finish(&mut self, l: Launch, since: Instant, ending: Ending) {
        let _ = self.done.send(Done {
            index: l.index,
            attempt: l.attempt,
            finished: Finished {
                ending,
                seconds: since.elapsed().as_secs_f64(),
                stdout: l.dir.join("stdout.log"),
                stderr: l.dir.join("stderr.log"),
            },
        });
    }
}
