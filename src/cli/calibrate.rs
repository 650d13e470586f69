//! `meshparity calibrate SPEC --seeds N`: run the correct matrix and every selected mutation
//! over N seeds (and other dtypes, optimizers, learning rates if asked), in this process, and
//! report how much headroom correct runs leave under each limit and by how much each bug clears
//! it. Writes `calibration.json` and `calibration.html` into `--out`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use meshparity_reports::calibration::{self, Calibration};
use meshparity_reports::{files, RunResults};
use meshparity_runner::calibrate::{self, Config, Options};
use meshparity_runner::Plan;
use meshparity_specs::{DType, Keyword, Optimizer, Spec};

use super::{load_spec, SelectArgs};
use crate::exit;

#[derive(clap::Args)]
pub struct Args {
    /// The spec file.
    spec: PathBuf,
    /// How many seeds, counting up from --first-seed.
    #[arg(long, default_value_t = 20)]
    seeds: u64,
    /// The first seed (default: the spec's `[run] seed`).
    #[arg(long)]
    first_seed: Option<u64>,
    /// Sweep these dtypes instead of the spec's (comma-separated: f64,f32,bf16,f16).
    #[arg(long, value_delimiter = ',', value_parser = parse_dtype)]
    dtype: Vec<DType>,
    /// Sweep these optimizers instead of the spec's (sgd,adamw).
    #[arg(long, value_delimiter = ',', value_parser = parse_optimizer)]
    optimizer: Vec<Optimizer>,
    /// Sweep these learning rates instead of the spec's (e.g. 1e-3,1e-2).
    #[arg(long, value_delimiter = ',', value_parser = parse_lr)]
    lr: Vec<f64>,
    #[command(flatten)]
    select: SelectArgs,
    /// Inject the mutations on the first N seeds only (default: every seed).
    #[arg(long)]
    mutation_seeds: Option<u64>,
    /// Measure detection power instead of the catalog's margins: run sized perturbations
    /// (one rank's gradients ×(1+ε), one replica's ×(1−ε), a residual branch ×(1+ε)) at ε from
    /// 100 % down to 1e-4 %, and report per mesh and level the smallest caught on every seed.
    /// Built-in engine only.
    #[arg(long)]
    power: bool,
    /// CPU slots (default: the cores). A user's program takes one per rank it launches, so a
    /// sweep of 2-rank programs on 2 cores runs one program at a time; the built-in engine
    /// runs this many seeds at once on as many threads.
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
    /// End any program a command engine runs after SECONDS (default 900, `run`'s default for
    /// a training); the run it belonged to is recorded as an error and the sweep goes on.
    #[arg(long, value_name = "SECONDS", default_value_t = 900.0)]
    timeout: f64,
    /// Where calibration.json and calibration.html go.
    #[arg(long, default_value = "meshparity-calibration")]
    out: PathBuf,
    /// Print the JSON to stdout instead of the tables.
    #[arg(long)]
    json: bool,
    /// Also add the calibration as a section of this run directory's report.html (a run of the
    /// same spec: its results.json is read before the sweep starts).
    #[arg(long, value_name = "RUN_DIR")]
    report: Option<PathBuf>,
}

/// More seeds than a sweep can hold in memory (one work item each per unit and configuration)
/// or finish in a day on any machine.
const MAX_SEEDS: u64 = 100_000;

fn parse_dtype(s: &str) -> Result<DType, String> {
    DType::parse(s).ok_or_else(|| {
        let alias = DType::ALIASES
            .iter()
            .find(|(a, _)| a.eq_ignore_ascii_case(s));
        let hint = alias.map_or(String::new(), |(_, n)| format!("; did you mean `{n}`?"));
        format!("`{s}` is not a dtype (f64, f32, bf16, f16){hint}")
    })
}

fn parse_optimizer(s: &str) -> Result<Optimizer, String> {
    <Optimizer as Keyword>::parse(s)
        .ok_or_else(|| format!("`{s}` is not an optimizer (sgd, adamw)"))
}

fn parse_lr(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
        .ok_or_else(|| format!("`{s}` is not a positive learning rate"))
}

pub fn run(args: &Args) -> u8 {
    match calibrate_spec(args) {
        Ok(code) | Err(code) => code,
    }
}

/// The whole command; `Err` is an exit code reached before the end.
fn calibrate_spec(args: &Args) -> Result<u8, u8> {
    let loaded = load_spec(&args.spec, args.select.device).ok_or(exit::SPEC_ERROR)?;
    let filter = args.select.filter().map_err(|e| {
        eprintln!("error: {e}");
        exit::SPEC_ERROR
    })?;
    check_limits(args)?;
    // The run whose report gains the section is read first: a typo must not cost the sweep.
    let run = match &args.report {
        Some(dir) => match super::report::read(&dir.join(files::RESULTS)) {
            Ok(r) => Some((dir, r)),
            Err(e) => {
                eprintln!("error: --report: {e}");
                return Err(exit::SPEC_ERROR);
            }
        },
        None => None,
    };
    let spec = &loaded.spec;
    if args.select.check_size(spec).is_err() {
        return Err(exit::SPEC_ERROR);
    }
    let plan = Plan::build(spec);
    let selection = plan.select(&filter, args.select.partition);
    if selection.is_empty() {
        eprintln!("error: the filters select no job");
        return Err(exit::NOTHING_SELECTED);
    }
    if !super::supported(&args.spec, &loaded, Some((&plan, &selection))) {
        return Err(exit::SPEC_ERROR);
    }
    let configs = Config::product(&args.dtype, &args.optimizer, &args.lr);
    let mut units = Vec::new();
    for c in &configs {
        match calibrate::units(spec, &plan, &selection, c) {
            Ok(u) if args.power => units.push(calibrate::power::units(u)),
            Ok(u) => units.push(u),
            Err(e) => {
                eprintln!("error: {e}");
                return Err(exit::SPEC_ERROR);
            }
        }
    }
    let first_seed = args.first_seed.unwrap_or(spec.run.training.seed);
    if first_seed.checked_add(args.seeds).is_none() {
        eprintln!(
            "error: --first-seed {first_seed} + --seeds {} passes the largest seed",
            args.seeds
        );
        return Err(exit::SPEC_ERROR);
    }
    let opts = options(args, first_seed, configs.clone());
    let start = Instant::now();
    let samples = sweep(spec, &units, &opts, args, start)?;
    let _ = std::fs::remove_dir_all(&opts.scratch);
    let report = calibrate::summarize(
        &spec.name(),
        &configs,
        &opts,
        &samples,
        start.elapsed().as_secs_f64(),
    );
    let json = write(args, &report, run.as_ref().map(|(d, r)| (d.as_path(), r)))?;
    if args.json {
        println!("{}", String::from_utf8_lossy(&json));
    } else {
        print!("{}", calibration::text(&report));
        println!(
            "wrote {} and calibration.html",
            args.out.join("calibration.json").display()
        );
    }
    Ok(if !report.errors.is_empty() {
        exit::INFRA_ERROR
    } else if report.clean() {
        exit::OK
    } else {
        exit::CHECK_FAILED
    })
}

/// `--timeout` and `--seeds` within their bounds.
fn check_limits(args: &Args) -> Result<(), u8> {
    if !(args.timeout > 0.0 && args.timeout <= meshparity_runner::exec::options::MAX_SECONDS) {
        eprintln!(
            "error: --timeout must be a number of seconds above 0 and at most {} (30 days)",
            meshparity_runner::exec::options::MAX_SECONDS
        );
        return Err(exit::SPEC_ERROR);
    }
    if !(1..=MAX_SEEDS).contains(&args.seeds) {
        eprintln!("error: --seeds must be between 1 and {MAX_SEEDS}");
        return Err(exit::SPEC_ERROR);
    }
    Ok(())
}

/// The sweep's options from the flags.
fn options(args: &Args, first_seed: u64, configs: Vec<Config>) -> Options {
    Options {
        seeds: args.seeds,
        first_seed,
        configs,
        // Absolute: a command engine runs its program in its own directory, and the paths it is
        // given (the seed checkpoint) must name the same files from there.
        scratch: std::path::absolute(args.out.join("scratch"))
            .unwrap_or_else(|_| args.out.join("scratch")),
        mutation_seeds: args.mutation_seeds,
        // Power needs only verdicts, at every size: no traces.
        localize: !args.power,
        // The table's margins are each mutation's strongest signal over every level.
        first_catch: false,
        slots: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1),
    }
}

/// Every (configuration, unit, seed), with progress on stderr.
fn sweep(
    spec: &Spec,
    units: &[Vec<calibrate::Unit>],
    opts: &Options,
    args: &Args,
    start: Instant,
) -> Result<Vec<calibrate::Sample>, u8> {
    // On a terminal one line redrawn in place; in a CI log or a pipe one line per finished seed
    // run with the time so far, so a long sweep shows it is moving.
    let tty = std::io::stderr().is_terminal();
    let progress = |done: usize, total: usize| {
        let elapsed = start.elapsed().as_secs();
        let line = format!(
            "calibrating: {done}/{total} seed runs, {}m{:02}s",
            elapsed / 60,
            elapsed % 60
        );
        match (args.json, tty) {
            (true, _) => {}
            (false, true) => eprint!("\r{line}"),
            (false, false) => eprintln!("{line}"),
        }
    };
    // Command engines' programs run in this process: their output stays in each run's
    // program.log (the errors it explains are in the samples), off the progress lines.
    let forwarded = meshparity_command::output::forward_to_stderr(false);
    meshparity_command::process::set_time_limit(Some(std::time::Duration::from_secs_f64(
        args.timeout,
    )));
    let swept = calibrate::sweep(spec, units, opts, &crate::engines::Builtin, &progress);
    meshparity_command::process::set_time_limit(None);
    meshparity_command::output::forward_to_stderr(forwarded);
    if tty && !args.json {
        eprintln!();
    }
    swept.map_err(|e| {
        eprintln!("error: {e}");
        exit::INFRA_ERROR
    })
}

/// calibration.json and calibration.html, and the section in `--report`'s run; the JSON.
fn write(
    args: &Args,
    report: &Calibration,
    run: Option<(&Path, &RunResults)>,
) -> Result<Vec<u8>, u8> {
    let json = serde_json::to_vec_pretty(report).expect("calibration serializes");
    for (name, bytes) in [
        ("calibration.json", json.clone()),
        ("calibration.html", calibration::html(report).into_bytes()),
    ] {
        let path = args.out.join(name);
        if let Err(e) = meshparity_reports::write::atomic(&path, &bytes) {
            eprintln!("error: writing {}: {e}", path.display());
            return Err(exit::INFRA_ERROR);
        }
    }
    if let Some((dir, results)) = run {
        let path = dir.join(files::HTML);
        let page = meshparity_reports::html::html_with_calibration(results, report);
        if let Err(e) = meshparity_reports::write::atomic(&path, page.as_bytes()) {
            eprintln!("error: writing {}: {e}", path.display());
            return Err(exit::INFRA_ERROR);
        }
        eprintln!("added the calibration to {}", path.display());
    }
    Ok(json)
}
