//! The scheduler: walks the selected part of the DAG, starting a worker process for each job
//! whose dependencies passed, as slots allow; records every result the moment it is known.
//!
//! Each job is a small state machine — `Waiting` → `Running(attempt)` → `Done` — driven by one
//! loop on a current-thread tokio runtime: start what is ready, wait for a process to end or a
//! signal, record, repeat. A dependency that did not pass skips its dependents with the reason;
//! an infrastructure failure (crash, timeout, spawn failure) is retried up to `retries` times;
//! a check failure never is. SIGINT/SIGTERM stop starting jobs and end running ones (a second
//! one kills at once); what did not run is recorded as not run.

use std::collections::HashMap;
use std::path::PathBuf;

use meshparity_engine::judge::quote;
use meshparity_reports::{Attempt, JobRecord, Status};
use petgraph::graph::NodeIndex;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::child::{self, Finished};
use super::options::RunOptions;
use super::progress::Progress;
use super::slots::Slots;
use super::store::Store;
use super::verdict::{verdict, Verdict};

use crate::plan::{Job, Plan, Selection};

/// Lines of log kept in a record for errors.
const TAIL_LINES: usize = 30;

enum State {
    Waiting,
    Running,
    Done(Box<JobRecord>),
}

/// What the scheduler hands back: records in plan order.
pub struct Execution {
    pub records: Vec<JobRecord>,
    pub interrupted: bool,
}

struct Run<'a> {
    plan: &'a Plan,
    opts: &'a RunOptions,
    order: Vec<NodeIndex>,
    index: HashMap<NodeIndex, usize>,
    states: Vec<State>,
    attempts: Vec<Vec<Attempt>>,
    store: Store,
    progress: Progress,
    failures: usize,
    slots: Slots,
}

/// Execute `selection` of `plan`. `previous` holds records of an earlier run (for `--resume`):
/// jobs that passed there are not run again.
pub async fn execute(
    plan: &Plan,
    selection: &Selection,
    opts: &RunOptions,
    previous: HashMap<String, JobRecord>,
    live_progress: bool,
) -> std::io::Result<Execution> {
    let order: Vec<NodeIndex> = selection.jobs.iter().map(|(n, _)| *n).collect();
    let mut run = Run {
        plan,
        opts,
        index: order.iter().enumerate().map(|(i, n)| (*n, i)).collect(),
        states: order.iter().map(|_| State::Waiting).collect(),
        attempts: order.iter().map(|_| Vec::new()).collect(),
        store: Store::open(&opts.run_dir)?,
        progress: Progress::new(live_progress, order.len()),
        order,
        failures: 0,
        slots: Slots::new(opts),
    };
    for i in 0..run.order.len() {
        let job = &plan.graph[run.order[i]];
        if let Some(r) = previous
            .get(&job.id.to_string())
            .filter(|r| r.status.passed())
        {
            // Already in this run directory's log: carried over, not appended again.
            run.progress.finished(r);
            run.states[i] = State::Done(Box::new(r.clone()));
        }
    }

    let (cancel_tx, cancel_rx) = watch::channel(0u8);
    let signals = tokio::spawn(watch_signals(cancel_tx));
    let mut running: JoinSet<(usize, u32, Finished)> = JoinSet::new();
    loop {
        let cancelled = *cancel_rx.borrow() > 0;
        if !cancelled && !run.stopped() {
            run.start_ready(&mut running, &cancel_rx)?;
        }
        if running.is_empty() {
            break;
        }
        let mut rx = cancel_rx.clone();
        tokio::select! {
            Some(done) = running.join_next() => {
                let (i, attempt, finished) = done.expect("job tasks do not panic");
                run.slots.release(&plan.graph[run.order[i]]);
                let cancelled = *cancel_rx.borrow() > 0;
                run.attempt_done(i, attempt, finished, cancelled, &mut running, &cancel_rx)?;
            }
            _ = rx.changed() => {
                run.progress.note("interrupted: ending running jobs (Ctrl-C again to kill them now)");
            }
        }
    }
    signals.abort();
    let interrupted = *cancel_rx.borrow() > 0;
    let reason = if interrupted {
        "not run: the run was interrupted".to_owned()
    } else {
        format!(
            "not run: stopped after {} failure(s) (--fail-fast / --max-fail)",
            run.failures
        )
    };
    for i in 0..run.order.len() {
        if matches!(run.states[i], State::Waiting) {
            let r = run.record(i, Status::NotRun, reason.clone(), 0.0);
            run.finish(i, r)?;
        }
    }
    run.progress.finish();
    let records = run
        .states
        .into_iter()
        .map(|s| match s {
            State::Done(r) => *r,
            _ => unreachable!("every job ends done"),
        })
        .collect();
    Ok(Execution {
        records,
        interrupted,
    })
}

async fn watch_signals(cancel: watch::Sender<u8>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    loop {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        cancel.send_modify(|c| *c = c.saturating_add(1));
    }
}

impl Run<'_> {
    fn job(&self, i: usize) -> &Job {
        &self.plan.graph[self.order[i]]
    }

    fn stopped(&self) -> bool {
        self.opts.max_fail.is_some_and(|m| self.failures >= m)
    }

    fn job_dir(&self, i: usize, attempt: u32) -> PathBuf {
        let name: String = self
            .job(i)
            .name
            .chars()
            .map(|c| {
                // Every character a spec name may hold is kept, so two names never map to one
                // directory; only the job name's `/` separators are replaced.
                if c.is_ascii_alphanumeric() || "._@-+".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        // The id keeps apart whatever might still map alike (and names a job exactly).
        let id = self.job(i).id.to_string();
        self.opts
            .run_dir
            .join("jobs")
            .join(format!("{name}-{}", &id[..8]))
            .join(format!("attempt-{attempt}"))
    }

    /// Start every waiting job whose dependencies are done, as slots allow; skip those whose
    /// dependencies did not pass.
    fn start_ready(
        &mut self,
        running: &mut JoinSet<(usize, u32, Finished)>,
        cancel: &watch::Receiver<u8>,
    ) -> std::io::Result<()> {
        for i in 0..self.order.len() {
            if !matches!(self.states[i], State::Waiting) {
                continue;
            }
            let mut blocked = None;
            let mut ready = true;
            for d in self.plan.dependencies(self.order[i]) {
                match self.index.get(&d).map(|&k| &self.states[k]) {
                    Some(State::Done(r)) if r.status.passed() => {}
                    Some(State::Done(r)) => blocked = blocked.or(Some(r.name.clone())),
                    _ => ready = false,
                }
            }
            if let Some(dep) = blocked {
                let r = self.record(
                    i,
                    Status::Skipped,
                    format!("skipped: dependency `{dep}` did not pass"),
                    0.0,
                );
                self.finish(i, r)?;
                continue;
            }
            if !ready {
                continue;
            }
            if !self.slots.take(&self.plan.graph[self.order[i]]) {
                continue;
            }
            self.spawn(i, 1, running, cancel);
        }
        Ok(())
    }

    fn spawn(
        &mut self,
        i: usize,
        attempt: u32,
        running: &mut JoinSet<(usize, u32, Finished)>,
        cancel: &watch::Receiver<u8>,
    ) {
        let job = self.job(i);
        let dir = self.job_dir(i, attempt);
        let mut args = vec![
            "worker".to_owned(),
            "--spec".into(),
            self.opts.spec.display().to_string(),
            "--job".into(),
            job.id.to_string(),
            "--out".into(),
            dir.display().to_string(),
            "--cache".into(),
            self.opts.cache_dir.display().to_string(),
            "--scratch".into(),
            self.opts.run_dir.join("artifacts").display().to_string(),
            "--attempt".into(),
            attempt.to_string(),
        ];
        if self.opts.no_cache {
            args.push("--no-cache".into());
        }
        if let Some(device) = self.opts.device {
            args.extend(["--device".into(), device.to_string()]);
        }
        let timeout = self.opts.timeouts.for_job(job);
        let (exe, grace, cancel) = (self.opts.exe.clone(), self.opts.grace, cancel.clone());
        self.states[i] = State::Running;
        running.spawn(async move {
            let f = child::run(&exe, &args, &dir, timeout, grace, cancel).await;
            (i, attempt, f)
        });
        let names: Vec<String> = (0..self.order.len())
            .filter(|&k| matches!(self.states[k], State::Running))
            .map(|k| self.job(k).name.clone())
            .collect();
        self.progress.running(&names);
    }

    fn attempt_done(
        &mut self,
        i: usize,
        attempt: u32,
        f: Finished,
        cancelled: bool,
        running: &mut JoinSet<(usize, u32, Finished)>,
        cancel: &watch::Receiver<u8>,
    ) -> std::io::Result<()> {
        let dir = self.job_dir(i, attempt);
        let timeout = self.opts.timeouts.for_job(self.job(i));
        let exit = f.exit_text();
        let Verdict {
            status,
            summary,
            detail,
            cached,
            adapter,
        } = verdict(&f, &dir, timeout);
        self.attempts[i].push(Attempt {
            status,
            seconds: f.seconds,
            exit,
            log_tail: if status.passed() || status == Status::Failed {
                String::new()
            } else {
                f.log_tail(TAIL_LINES)
            },
            dir: Some(dir.display().to_string()),
        });
        if status.is_infra() && attempt <= self.opts.retries && !cancelled {
            self.progress.note(&format!(
                "   RETRY {}  attempt {} was {}: {summary}",
                self.job(i).name,
                attempt,
                status.as_str()
            ));
            self.slots.retake(&self.plan.graph[self.order[i]]);
            self.spawn(i, attempt + 1, running, cancel);
            return Ok(());
        }
        let status = if status == Status::Passed && attempt > 1 {
            Status::Flaky
        } else {
            status
        };
        let seconds: f64 = self.attempts[i].iter().map(|a| a.seconds).sum();
        let mut r = self.record(i, status, summary, seconds);
        r.detail = detail;
        r.cached = cached;
        r.adapter = adapter;
        if matches!(status, Status::Failed | Status::Error | Status::Timeout) {
            self.failures += 1;
        }
        self.finish(i, r)
    }

    fn record(&self, i: usize, status: Status, summary: String, seconds: f64) -> JobRecord {
        let job = self.job(i);
        JobRecord {
            id: job.id.to_string(),
            name: job.name.clone(),
            kind: job.kind.level_name().to_owned(),
            model: job.model().to_owned(),
            mesh: job.mesh.clone(),
            level: job.level().map(|l| l.as_str().to_owned()),
            mutation: job.mutation().map(str::to_owned),
            dtype: job.dtype.to_string(),
            device: job.device.to_string(),
            adapter: String::new(),
            world_size: job.world_size,
            status,
            summary,
            seconds,
            attempts: self.attempts[i].clone(),
            needs: self
                .plan
                .dependencies(self.order[i])
                .iter()
                .map(|d| self.plan.graph[*d].id.to_string())
                .collect(),
            cached: false,
            // Quoted: a spec path like `$(touch x).toml` must stay a path when pasted.
            reproduce: format!(
                "meshparity run {}{} --filter {}",
                quote(&self.opts.spec.display().to_string()),
                self.opts
                    .device
                    .map(|d| format!(" --device {d}"))
                    .unwrap_or_default(),
                quote(&format!("name={}", job.name))
            ),
            detail: None,
        }
    }

    fn finish(&mut self, i: usize, r: JobRecord) -> std::io::Result<()> {
        self.store.append(&r)?;
        self.progress.finished(&r);
        self.states[i] = State::Done(Box::new(r));
        Ok(())
    }
}
