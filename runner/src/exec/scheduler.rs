//! The scheduler: walks the selected part of the DAG, handing each job whose dependencies
//! passed to the executor as slots allow; records every result the moment it is known.
//!
//! Each job is a small state machine — `Waiting` → `Running(attempt)` → `Done` — driven by one
//! loop on a current-thread tokio runtime: start what is ready, wait for an attempt to end or a
//! signal, record, repeat. Readiness is kept by dependency counts ([`Ready`]), so an event
//! costs the jobs it touches, not a scan of the run. A dependency that did not pass skips its
//! dependents with the reason; an infrastructure failure (crash, timeout, spawn failure, a
//! cluster's node failure) is retried up to `retries` times; a check failure never is.
//! SIGINT/SIGTERM stop starting jobs and end running ones (a second one kills at once); what
//! did not run is recorded as not run. Where attempts run is the [`Executor`]'s business.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use meshparity_judge::judge::quote;
use meshparity_reports::{Attempt, JobRecord, Status};
use petgraph::graph::NodeIndex;
use tokio::sync::{mpsc, watch};

use super::child::Finished;
use super::executor::{self, Done, Executor, Launch};
use super::options::RunOptions;
use super::progress::Progress;
use super::ready::Ready;
use super::slots::Slots;
use super::store::Store;
use super::verdict::{verdict, Verdict};
use super::worker_argv;

use crate::plan::job_file::{JobFile, JOB_FILE};
use crate::plan::{Job, Plan, Role, Selection};

/// Lines of log kept in a record for errors: room for a command engine's error after the
/// program's own last lines (its first error line, the last lines, a traceback quoted whole:
/// `meshparity_command::cause`).
const TAIL_LINES: usize = 100;

enum State {
    Waiting,
    Running,
    Done(Box<JobRecord>),
}

/// What the scheduler hands back: records in plan order.
pub struct Execution {
    pub records: Vec<JobRecord>,
    pub interrupted: bool,
    /// Why the results log stopped taking records, if it did: `--resume` then reruns the jobs
    /// it lacks.
    pub log_failure: Option<String>,
}

struct Run<'a> {
    plan: &'a Plan,
    opts: &'a RunOptions,
    order: Vec<NodeIndex>,
    roles: Vec<Role>,
    states: Vec<State>,
    attempts: Vec<Vec<Attempt>>,
    ready: Ready,
    /// Jobs with an attempt in flight.
    running: BTreeSet<usize>,
    executor: Box<dyn Executor>,
    store: Store,
    progress: Progress,
    failures: usize,
    slots: Slots,
    /// Each job's fingerprint, in `order`.
    prints: Vec<String>,
    /// What the run has copied into its jobs' evidence.
    evidence: super::evidence::Evidence,
}

/// Execute `selection` of `plan`. `previous` holds records of an earlier run (for `--resume`):
/// jobs that passed there, judged under what this run would judge them under (the same
/// fingerprint), are not run again.
pub async fn execute(
    plan: &Plan,
    selection: &Selection,
    opts: &RunOptions,
    previous: HashMap<String, JobRecord>,
    live_progress: bool,
) -> std::io::Result<Execution> {
    let order: Vec<NodeIndex> = selection.jobs.iter().map(|(n, _)| *n).collect();
    // What a worker's processes leave behind when it is ended comes back here to be ended too
    // (child.rs).
    meshparity_procs::become_subreaper();
    let (cancel_tx, cancel_rx) = watch::channel(super::signals::received());
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let executor = executor::open(
        &opts.executor,
        opts.exe.clone(),
        opts.run_dir.clone(),
        opts.grace,
        cancel_rx.clone(),
        done_tx,
    );
    let slots = Slots::new(opts, order.iter().map(|n| plan.graph[*n].device));
    let ready = Ready::of_plan(plan, &order, &slots, opts.no_skip);
    let mut fingerprints = crate::fingerprint::Fingerprints::new(plan, opts.basis.clone());
    let prints: Vec<String> = order.iter().map(|n| fingerprints.of(*n)).collect();
    let mut run = Run {
        plan,
        opts,
        roles: selection.jobs.iter().map(|(_, r)| *r).collect(),
        states: order.iter().map(|_| State::Waiting).collect(),
        attempts: order.iter().map(|_| Vec::new()).collect(),
        ready,
        running: BTreeSet::new(),
        executor,
        store: Store::open(&opts.run_dir)?,
        progress: Progress::new(live_progress, order.len(), opts.lines),
        order,
        failures: 0,
        slots,
        prints,
        evidence: Default::default(),
    };
    run.carry_over(&previous);

    let signals = tokio::spawn(super::signals::watch(cancel_tx));
    run.drive(&cancel_rx, &mut done_rx).await?;
    signals.abort();
    let interrupted = *cancel_rx.borrow() > 0;
    run.not_run(interrupted)?;
    run.progress.finish();
    let log_failure = run.store.failure().map(str::to_owned);
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
        log_failure,
    })
}

impl Run<'_> {
    /// Start jobs as they become ready and take their attempts' endings until none runs: the
    /// run finished, stopped (failures) or cancelled (`cancel`'s level above 0).
    async fn drive(
        &mut self,
        cancel: &watch::Receiver<u8>,
        done_rx: &mut mpsc::UnboundedReceiver<Done>,
    ) -> std::io::Result<()> {
        let mut withdrawn = false;
        // One receiver for the whole loop: a fresh clone each turn had not seen the interrupt
        // and woke at once, so the loop spun (and printed its note) until the running jobs
        // ended.
        let mut rx = cancel.clone();
        loop {
            let cancelled = *cancel.borrow() > 0;
            if !cancelled && !self.stopped() {
                self.start_ready()?;
            } else if self.stopped() && !withdrawn {
                // A cluster's queue still holds what was submitted: take it back.
                self.executor.withdraw_pending();
                withdrawn = true;
            }
            if self.running.is_empty() {
                return Ok(());
            }
            tokio::select! {
                Some(done) = done_rx.recv() => {
                    self.slots.release(&self.plan.graph[self.order[done.index]]);
                    let cancelled = *cancel.borrow() > 0;
                    self.attempt_done(done.index, done.attempt, done.finished, cancelled)?;
                }
                _ = rx.changed() => {
                    self.progress.note(&format!(
                        "interrupted: ending running jobs (Ctrl-C again to kill them now); \
                         continue later with `meshparity run SPEC --resume {}`",
                        quote(&self.opts.run_dir.display().to_string())
                    ));
                }
            }
        }
    }

    /// Jobs that passed in `previous` under the same fingerprint: done, not run again (already
    /// in this run directory's log: carried over, not appended again) — unless a job they
    /// depend on runs again: a check then judges the files the rerun writes, not ones that are
    /// gone (a resume after the cache was cleared reruns the trainings; a roundtrip carried
    /// over let the forward check after it start before the reference it reads existed again).
    fn carry_over(&mut self, previous: &HashMap<String, JobRecord>) {
        let deps = super::ready::dependencies(self.plan, &self.order);
        let mut kept: Vec<Option<JobRecord>> = (0..self.order.len())
            .map(|i| {
                let job = &self.plan.graph[self.order[i]];
                previous
                    .get(&job.id.to_string())
                    .filter(|r| r.status.passed() && r.fingerprint == self.prints[i])
                    .cloned()
            })
            .collect();
        // A job is carried only once every job it depends on was: whatever depends on a job
        // that runs again runs again, and no carried job is made ready by a dependency carried
        // after it.
        let mut carried = vec![false; kept.len()];
        let mut progress = true;
        while progress {
            progress = false;
            for i in 0..kept.len() {
                if carried[i] || !deps[i].iter().all(|&d| carried[d]) {
                    continue;
                }
                let Some(r) = kept[i].take() else { continue };
                self.progress.kept(&r);
                self.ready.carried(i, true);
                self.states[i] = State::Done(Box::new(r));
                carried[i] = true;
                progress = true;
            }
        }
    }

    /// Every job still waiting recorded as not run, and why.
    fn not_run(&mut self, interrupted: bool) -> std::io::Result<()> {
        let reason = if interrupted {
            "not run: the run was interrupted".to_owned()
        } else {
            format!(
                "not run: stopped after {} failure(s) (--fail-fast / --max-fail)",
                self.failures
            )
        };
        for i in 0..self.order.len() {
            if matches!(self.states[i], State::Waiting) {
                let r = self.record(i, Status::NotRun, reason.clone(), 0.0);
                self.finish(i, r)?;
            }
        }
        Ok(())
    }

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

    /// Skip the jobs whose dependencies did not pass, then start ready jobs as slots allow.
    fn start_ready(&mut self) -> std::io::Result<()> {
        loop {
            let blocked = self.ready.take_blocked();
            if blocked.is_empty() {
                break;
            }
            for (i, dep) in blocked {
                if !matches!(self.states[i], State::Waiting) {
                    continue;
                }
                let passed = matches!(&self.states[dep], State::Done(r) if r.status.passed());
                let dep = self.job(dep).name.clone();
                let why = if passed {
                    // --no-skip judged `dep` after a failed check; what waits for the whole
                    // cell's checks (a mutation) still needs them all to pass.
                    format!("skipped: a check of its cell before `{dep}` did not pass")
                } else {
                    format!("skipped: dependency `{dep}` did not pass")
                };
                let r = self.record(i, Status::Skipped, why, 0.0);
                self.finish(i, r)?;
            }
        }
        // Walk the ready set from a cursor (not a copy of it: tens of thousands of jobs can be
        // ready at once) and stop as soon as no slot is free.
        let mut cursor = None;
        while let Some(i) = self.ready.next_after(cursor) {
            cursor = Some(i);
            if !self.slots.take(&self.plan.graph[self.order[i]]) {
                if self.slots.full() {
                    break;
                }
                continue;
            }
            self.ready.started(i);
            self.spawn(i, 1);
        }
        Ok(())
    }

    fn spawn(&mut self, i: usize, attempt: u32) {
        let job = self.job(i);
        let dir = self.job_dir(i, attempt);
        // The worker starts from the job as planned here, not from re-planning the spec; a job
        // file that cannot be written leaves it to plan for itself.
        let job_file = dir.join(JOB_FILE);
        let written = std::fs::create_dir_all(&dir)
            .and_then(|_| JobFile::of(self.plan, self.order[i], &self.opts.spec).write(&job_file));
        let (cpus, gpus, own_ranks) = executor::resources(job);
        let args = worker_argv::args(&worker_argv::Attempt {
            opts: self.opts,
            job,
            dir: &dir,
            attempt,
            job_file: written.is_ok().then_some(job_file.as_path()),
            slots: self.slots.weight(job),
            cpus,
        });
        let launch = Launch {
            index: i,
            attempt,
            name: job.name.clone(),
            job_id: job.id.to_string(),
            args,
            dir,
            timeout: self.opts.timeouts.for_job(job),
            cpus,
            gpus,
            own_ranks,
            served: executor::served(job),
        };
        self.states[i] = State::Running;
        self.running.insert(i);
        self.executor.launch(launch);
        let names: Vec<String> = self
            .running
            .iter()
            .map(|&k| self.job(k).name.clone())
            .collect();
        self.progress.running(&names);
    }

    fn attempt_done(
        &mut self,
        i: usize,
        attempt: u32,
        f: Finished,
        cancelled: bool,
    ) -> std::io::Result<()> {
        let dir = self.job_dir(i, attempt);
        if !self.opts.keep_artifacts {
            let scratch = self.opts.run_dir.join(super::run_dir::SCRATCH);
            crate::worker::clean_up_partial(&dir, &[&self.opts.cache_dir, &scratch]);
        }
        // A search's tries, whatever became of its worker.
        if let Some(tries) = super::worker_argv::tries_dir(self.opts, self.job(i), attempt) {
            let _ = std::fs::remove_dir_all(tries);
        }
        let timeout = self.opts.timeouts.for_job(self.job(i));
        let exit = f.exit_text();
        let Verdict {
            status,
            summary,
            detail,
            cached,
            adapter,
            shrink_seconds,
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
            self.spawn(i, attempt + 1);
            return Ok(());
        }
        let status = if status == Status::Passed && attempt > 1 {
            Status::Flaky
        } else {
            status
        };
        // The job's time is its check's; what its shrink search took is reported apart.
        let seconds: f64 = self.attempts[i].iter().map(|a| a.seconds).sum();
        let shrink_seconds = shrink_seconds.clamp(0.0, seconds);
        let mut r = self.record(i, status, summary, seconds - shrink_seconds);
        r.shrink_seconds = shrink_seconds;
        r.detail = detail;
        r.cached = cached;
        r.adapter = adapter;
        self.evidence.gather(&self.opts.run_dir, &dir, &mut r);
        if matches!(status, Status::Failed | Status::Error | Status::Timeout) {
            self.failures += 1;
        }
        self.finish(i, r)?;
        // The worker's result is in the run's log now (and its results.json at the end): a
        // third copy per job was a sixth of the quickstart's run directory.
        if !self.opts.keep_artifacts {
            let _ = std::fs::remove_file(dir.join(crate::worker::RESULT_FILE));
        }
        Ok(())
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
            dependency: self.roles[i] == Role::Dependency,
            // Quoted: a spec path like `$(touch x).toml` must stay a path when pasted. The run
            // directory's copy of the spec, relative to it: the line runs from there.
            reproduce: format!(
                "meshparity run {}{} --filter {}",
                quote(
                    &self
                        .opts
                        .spec_copy
                        .as_ref()
                        .unwrap_or(&self.opts.spec)
                        .display()
                        .to_string()
                ),
                self.opts
                    .device
                    .map(|d| format!(" --device {d}"))
                    .unwrap_or_default(),
                quote(&format!("name={}", crate::plan::exact(&job.name)))
            ),
            detail: None,
            fingerprint: self.prints[i].clone(),
            shrink_seconds: 0.0,
        }
    }

    fn finish(&mut self, i: usize, r: JobRecord) -> std::io::Result<()> {
        self.store.append(&r);
        self.progress.finished(&r);
        self.running.remove(&i);
        self.ready.done(i, r.status.passed());
        self.states[i] = State::Done(Box::new(r));
        Ok(())
    }
}
