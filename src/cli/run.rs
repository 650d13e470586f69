//! `meshparity run SPEC`: plan, execute every selected job in its own worker process, write
//! the results.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use meshparity_reports::{JobRecord, RunResults, FORMAT_VERSION};
use meshparity_runner::exec::executor::ExecutorKind;
use meshparity_runner::exec::run_dir::RunDir;
use meshparity_runner::exec::{self, store, RunOptions, Timeouts};
use meshparity_runner::{say, Plan, Selection};

use super::outcome::{code, summary};
use crate::exit;
use options::{options, shrink_policy, Color};

mod options;

/// The free room a memory filesystem needs before shrink searches make their tries there: a
/// try of the built-in models writes a few megabytes, and a full one must not fail a search.
const TRIES_ROOM: u64 = 2 << 30;

#[derive(clap::Args)]
pub struct Args {
    /// Spec file.
    spec: PathBuf,
    #[command(flatten)]
    select: super::SelectArgs,
    /// Concurrent slots (default: CPU cores; on Slurm, the executor's `max_pending`). A job
    /// simulating many ranks takes several.
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
    /// Jobs running at once on each GPU (GPU jobs do not take CPU slots; on Slurm the cluster
    /// places GPU jobs).
    #[arg(long, default_value_t = 1, value_name = "N")]
    gpu_slots: usize,
    /// Retry infrastructure errors (crash, timeout, spawn failure) up to N times; a job that
    /// then passes is reported flaky. Check failures are never retried.
    #[arg(long, default_value_t = 0)]
    retries: u32,
    /// Stop starting jobs after the first failure.
    #[arg(long)]
    fail_fast: bool,
    /// Stop starting jobs after N failures (N ≥ 1; 1 is --fail-fast).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_fail: Option<u64>,
    /// Judge every level of a cell even after one fails (a failed curve skips the oracle
    /// level otherwise). Mutations still need every check of their cell to pass: a bug cannot
    /// be told from a mesh that already fails.
    #[arg(long)]
    no_skip: bool,
    /// Colour the status words: auto (a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    color: Color,
    /// Print passing jobs' whole summaries (by default a passing line says what passed and
    /// stops; failures are always in full, and results.json holds everything).
    #[arg(long, short = 'v')]
    verbose: bool,
    /// Time limit: SECONDS for every job, or KEY=SECONDS for a kind of job (reference, train,
    /// roundtrip, forward, routing, curve, oracle, trace, mutation) or a job-name glob that matches
    /// some job. Repeatable; later wins.
    #[arg(long, value_name = "[KEY=]SECONDS")]
    timeout: Vec<String>,
    /// Seconds between SIGTERM and SIGKILL when a job is ended.
    #[arg(long, default_value_t = 5.0)]
    grace: f64,
    /// Recompute reference artifacts even when cached.
    #[arg(long)]
    no_cache: bool,
    /// Keep every file jobs write: localization traces, mutated runs' shards and weights.
    /// By default a judged job keeps only the files its result cites (the compared pair behind
    /// each `meshparity compare` command), and the run drops its shared reference traces at
    /// the end.
    #[arg(long)]
    keep_artifacts: bool,
    /// Shrink every failed check and every caught mutation, not only the first failure of each
    /// kind: search for the smallest configuration still failing the same level at the same
    /// site — fewer layers, smaller widths, lower degrees, f32 — within SECONDS per job
    /// (default 20), and write it as `repro/spec.toml` in the job's directory with the command
    /// that runs it. By default only what went wrong shrinks — the first failed check of each
    /// (model, mesh, level), within 20 s; the rest name that job — and a caught mutation (the
    /// passing outcome of its job) does not. A job's time is its check's; shrinking is
    /// reported apart.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "20")]
    shrink: Option<f64>,
    /// Shrink no failure (no `repro/`); `--shrink` wins over it. The environment's
    /// MESHPARITY_NO_SHRINK=1 says the same for every run (CI jobs that only want verdicts).
    #[arg(
        long,
        env = "MESHPARITY_NO_SHRINK",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    no_shrink: bool,
    /// A memory filesystem (tmpfs) where shrink searches make and delete their tries, which on
    /// a disk filesystem cost more than the runs; one that is not a tmpfs or has under 2 GiB
    /// free keeps them in each job's directory. The runner removes its directory there when
    /// it ends, and the next runner any that a killed one left.
    #[arg(
        long,
        value_name = "DIR",
        env = "MESHPARITY_MEMORY_DIR",
        default_value = meshparity_files::SHM
    )]
    memory_dir: PathBuf,
    /// Continue the run in RUN_DIR: jobs that passed there are kept, the rest run.
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "run_dir")]
    resume: Option<PathBuf>,
    /// With --resume: resume though the directory's spec files changed. Only the results
    /// judged under what this run would judge them under (each record's fingerprint: the job,
    /// its limits, the binary, a program's files) are kept; the rest run again.
    #[arg(long, requires = "resume")]
    resume_force: bool,
    /// Run directory (default: OUTPUT/SPEC-NAME-TIMESTAMP, OUTPUT from `[run] output`). It must
    /// be new or empty: one holding another run is refused (see --force, --resume).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// With --run-dir: clear a directory that holds another run before this one starts.
    #[arg(long, requires = "run_dir")]
    force: bool,
    /// Plain lines instead of a live progress bar.
    #[arg(long)]
    no_progress: bool,
    #[command(flatten)]
    executor: super::executor::ExecutorArgs,
}

pub fn run(args: &Args) -> u8 {
    // From here on an interrupt ends the run cleanly (reports written, exit 130), however early.
    meshparity_runner::exec::signals::count_from_now();
    match checked(args) {
        Ok(code) | Err(code) => code,
    }
}

/// A problem with what was asked, said before any job starts.
fn spec_error(e: impl std::fmt::Display) -> u8 {
    say!("error: {e}");
    exit::SPEC_ERROR
}

/// The run: `Err` with the exit code where it stops before its jobs, `Ok` with the results'.
fn checked(args: &Args) -> Result<u8, u8> {
    let filter = args.select.filter().map_err(spec_error)?;
    let timeouts = Timeouts::parse(&args.timeout).map_err(spec_error)?;
    if !(args.grace >= 0.0 && args.grace <= exec::options::MAX_SECONDS) {
        return Err(spec_error(format_args!(
            "--grace must be a number of seconds between 0 and {} (30 days)",
            exec::options::MAX_SECONDS
        )));
    }
    let loaded = super::load_spec(&args.spec, args.select.device).ok_or(exit::SPEC_ERROR)?;
    let spec = &loaded.spec;
    args.select.check_size(spec).map_err(|_| exit::SPEC_ERROR)?;
    let plan = Plan::build(spec);
    every_timeout_matches(&plan, &timeouts)?;
    let selection = plan.select(&filter, args.select.partition);
    match (selection.is_empty(), args.select.partition) {
        (true, None) => {
            say!(
                "nothing selected: no job matches the filters{}",
                super::hint(&plan, &args.select)
            );
            return Err(exit::NOTHING_SELECTED);
        }
        // A shard of a small or filtered spec may get no job: it is a shard all the same, and
        // `report --merge` needs every shard's results to know the partition is whole.
        (true, Some(p)) => say!(
            "this shard ({p}) has no job: the filters and partition leave none here; writing an \
             empty shard for `report --merge`"
        ),
        (false, _) => {}
    }
    if !super::supported(&args.spec, &loaded, Some((&plan, &selection))) {
        return Err(exit::SPEC_ERROR);
    }
    // Every device the selection needs, found before any job starts.
    let jobs = selection.jobs.iter().map(|(n, _)| {
        let job = &plan.graph[*n];
        (&job.model_config, job.device)
    });
    let adapters = exec::meta::engines(&crate::engines::Builtin, spec, jobs).map_err(spec_error)?;
    let executor = args.executor.kind(spec).map_err(spec_error)?;
    let output = PathBuf::from(&spec.run.output);
    let (run_dir, previous, spec_copy) = claim(args, spec, &output)?;
    if let ExecutorKind::Slurm(_) = &executor {
        if let Some(warning) = exec::executor::slurm::local_only(&run_dir.path) {
            say!("warning: {warning}");
        }
    }
    let exe = std::env::current_exe().map_err(|e| {
        say!("error: cannot find this executable to launch workers: {e}");
        exit::INFRA_ERROR
    })?;
    // Shrink tries in memory where jobs run on this machine and it has room (a Slurm job's
    // node has its own /dev/shm); held until the run ends.
    let memory = match (&executor, shrink_policy(args.shrink, args.no_shrink)) {
        (ExecutorKind::Local, Some(_)) => {
            meshparity_files::MemoryDir::create(&args.memory_dir, TRIES_ROOM)
        }
        _ => None,
    };
    let tries = memory.as_ref().map(|m| m.path().to_owned());
    let basis = meshparity_runner::fingerprint::Basis::of(spec);
    // A user's program lives beside its spec, not in the run directory: its jobs rerun from the
    // spec where it lies.
    let spec_copy = (spec.engines.is_empty() && spec.variants.is_empty()).then_some(spec_copy);
    let opts = options(
        args,
        (&run_dir, &output),
        exe,
        executor,
        timeouts,
        (tries, basis, spec_copy),
    );
    let ran = Ran {
        adapters: &adapters,
        run_dir,
        previous,
    };
    execute(args, spec, (&plan, &selection), &opts, ran)
}

/// What a run starts from: the devices found, its claimed directory, the records it resumes.
struct Ran<'a> {
    adapters: &'a [meshparity_engine::Description],
    run_dir: RunDir,
    previous: HashMap<String, JobRecord>,
}

/// Run the selected jobs, then write and show the reports; the exit code.
fn execute(
    args: &Args,
    spec: &meshparity_specs::Spec,
    (plan, selection): (&Plan, &Selection),
    opts: &RunOptions,
    ran: Ran<'_>,
) -> Result<u8, u8> {
    let Ran {
        adapters,
        run_dir,
        previous,
    } = ran;
    let mut meta = exec::meta::collect(
        adapters,
        &args.spec,
        &spec.name(),
        spec.run.training.seed,
        &opts.run_dir,
    );
    meta.partition = args.select.partition.map(|p| p.to_string());
    meta.filters = args.select.filter.clone();
    let start = Instant::now();
    let live = !args.no_progress && std::io::IsTerminal::is_terminal(&std::io::stderr());
    say!(
        "running {} job(s) from {} in {}",
        selection.jobs.len(),
        args.spec.display(),
        opts.run_dir.display()
    );
    let execution =
        exec::block_on(exec::execute(plan, selection, opts, previous, live)).map_err(|e| {
            say!("error: writing results in {}: {e}", opts.run_dir.display());
            exit::INFRA_ERROR
        })?;
    meta.finished = exec::meta::now();
    meta.seconds = start.elapsed().as_secs_f64();
    meta.interrupted = execution.interrupted;
    meta.disk_bytes = Some(run_dir.finish(args.keep_artifacts));
    if let Some(why) = &execution.log_failure {
        say!(
            "warning: the results log stopped taking records ({why}); the reports below hold \
             every result, and --resume reruns the jobs the log lacks"
        );
    }
    let results = RunResults {
        format_version: FORMAT_VERSION,
        meta,
        jobs: execution.records,
    };
    report(&results, &opts.run_dir, spec)
}

/// The results written as every report, the final table shown (and, in CI, the step summary
/// and annotations), the exit code.
fn report(results: &RunResults, dir: &Path, spec: &meshparity_specs::Spec) -> Result<u8, u8> {
    meshparity_reports::write_all(results, dir).map_err(|e| {
        say!("error: writing reports in {}: {e}", dir.display());
        exit::INFRA_ERROR
    })?;
    meshparity_runner::exec::console::stdout(format_args!("{}", summary(results)));
    super::ci::step_summary(&meshparity_reports::markdown::markdown(
        results,
        &super::ci::report_link(meshparity_reports::files::HTML),
    ));
    super::ci::annotations(results, Some(spec));
    say!(
        "reports: {0}/report.html, {0}/junit.xml, {0}/summary.md, {0}/results.json",
        dir.display()
    );
    if results.meta.interrupted {
        say!(
            "interrupted: continue with `meshparity run {} --resume {}` (what passed is kept)",
            meshparity_judge::judge::quote(&results.meta.spec),
            meshparity_judge::judge::quote(&dir.display().to_string())
        );
    }
    if results.jobs.iter().any(|j| !j.status.passed()) {
        say!(
            "reproduce lines are relative to the run directory: cd {} first",
            meshparity_judge::judge::quote(&dir.display().to_string())
        );
    }
    Ok(code(results))
}

/// Every `--timeout KEY=SECS` names a kind of job or matches a job of the plan: a typo would
/// otherwise be accepted and applied to nothing.
fn every_timeout_matches(plan: &Plan, timeouts: &Timeouts) -> Result<(), u8> {
    let jobs: Vec<&meshparity_runner::Job> = plan.graph.node_weights().collect();
    let unmatched = timeouts.unmatched(&jobs);
    for why in &unmatched {
        say!("error: {why}");
    }
    if unmatched.is_empty() {
        Ok(())
    } else {
        Err(exit::SPEC_ERROR)
    }
}

/// The run directory this run writes, held for its whole duration, with the results of the
/// run it resumes.
fn claim(
    args: &Args,
    spec: &meshparity_specs::Spec,
    output: &Path,
) -> Result<(RunDir, HashMap<String, JobRecord>, PathBuf), u8> {
    let fail = |e: &dyn std::fmt::Display| {
        say!("error: {e}");
        exit::SPEC_ERROR
    };
    let Some(dir) = &args.resume else {
        let run_dir = match &args.run_dir {
            Some(dir) => RunDir::open_new(dir, args.force),
            None => RunDir::create_unique(output, &spec.name(), &chrono_stamp()),
        }
        .map_err(|e| fail(&e))?;
        let copy = run_dir.record_spec(spec).map_err(|e| fail(&e))?;
        return Ok((run_dir, HashMap::new(), copy));
    };
    if !dir.is_dir() {
        return Err(fail(&format!(
            "cannot resume {}: no such directory",
            dir.display()
        )));
    }
    // Nothing is written into a directory that is not a run (its lock file would be); a run
    // whose runner holds it but has not written its log yet has its lock file.
    let has = |name: &str| dir.join(name).exists();
    if !has(store::RESULTS_LOG) && !has(meshparity_files::LOCK_FILE) {
        return Err(fail(&format!(
            "cannot resume {}: it has no {} (is it a run directory?)",
            dir.display(),
            store::RESULTS_LOG
        )));
    }
    // The lock first: a runner that holds the directory may not have written its log yet.
    let run_dir = RunDir::open(dir).map_err(|e| fail(&e))?;
    if !dir.join(store::RESULTS_LOG).is_file() {
        return Err(fail(&format!(
            "cannot resume {}: it has no {} (is it a run directory?)",
            dir.display(),
            store::RESULTS_LOG
        )));
    }
    if !args.resume_force {
        run_dir.check_spec(spec).map_err(|e| fail(&e))?;
    }
    let mut previous = store::load(dir).map_err(|e| {
        fail(&format!(
            "cannot resume {}: {e} (is it a run directory?)",
            dir.display()
        ))
    })?;
    // An engine run whose artifacts are gone (a cleared cache) runs again.
    previous.retain(|_, r| store::still_usable(r));
    let copy = run_dir.record_spec(spec).map_err(|e| fail(&e))?;
    Ok((run_dir, previous, copy))
}

fn chrono_stamp() -> String {
    exec::meta::now()
        .replace([':', '-'], "")
        .replace('T', "-")
        .trim_end_matches('Z')
        .to_owned()
}
