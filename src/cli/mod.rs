//! Command-line interface: arguments resolved once into the objects that do the work.

mod calibrate;
mod ci;
mod compare;
mod compare_profile;
mod executor;
mod list;
mod outcome;
mod plan;
mod report;
mod run;
mod schema;
mod serve;
mod shell;
mod validate;
mod worker;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use meshparity_runner::exec::console;
use meshparity_runner::say;
use meshparity_specs::{Device, Loaded, SpecError};

use crate::exit;

#[derive(Parser)]
#[command(
    name = "meshparity",
    version = env!("MESHPARITY_VERSION"),
    about = "Proves a parallelized training setup computes the same thing as its single-device oracle",
    after_help = exit::HELP
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check spec files and report every problem with file:line:column.
    #[command(after_help = exit::HELP_VALIDATE)]
    Validate(validate::Args),
    /// Show the job DAG a spec expands into.
    #[command(after_help = exit::HELP_PLAN)]
    Plan(plan::Args),
    /// Run every selected job (each in its own process) and write the results.
    #[command(after_help = exit::HELP)]
    Run(run::Args),
    /// Measure the gates: run the matrix and every mutation over many seeds (and dtypes,
    /// optimizers, learning rates) and report headroom, margin and limits to consider.
    #[command(after_help = exit::HELP_CALIBRATE)]
    Calibrate(calibrate::Args),
    /// Render a run's reports (JUnit XML, HTML, Markdown) from its results.json.
    #[command(after_help = exit::HELP_REPORT)]
    Report(report::Args),
    /// Print the JSON Schema (draft-07) of the spec format, for editors.
    #[command(after_help = exit::HELP_PRINT)]
    Schema,
    /// List what this build offers: `list devices` (the CPU and each GPU adapter) and `list
    /// mutations` (the catalogued bugs).
    #[command(after_help = exit::HELP_PRINT)]
    List(list::Args),
    /// Compare two checkpoints (safetensors, sharded or not) or two metric curves (.jsonl).
    /// Exit 0: match; 1: mismatch; 2: bad input or nothing compared.
    Compare(compare::Args),
    /// Print a shell completion script: `meshparity completions bash > /etc/bash_completion.d/meshparity`
    /// (zsh: into a directory on $fpath as `_meshparity`; fish: ~/.config/fish/completions/).
    #[command(after_help = exit::HELP_PRINT)]
    Completions(shell::CompletionArgs),
    /// Print the man page (roff): `meshparity man > meshparity.1; man ./meshparity.1`.
    #[command(after_help = exit::HELP_PRINT)]
    Man,
    /// Run one job in this process (what `run` launches for each job).
    #[command(hide = true)]
    Worker(worker::Args),
    /// Run job after job in this process, as the runner asks on stdin (its GPU jobs: one device
    /// setup for all of them).
    #[command(hide = true)]
    Serve(serve::Args),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Validate(args) => validate::run(&args),
        Command::Plan(args) => plan::run(&args),
        Command::Schema => schema::run(),
        Command::List(args) => list::run(&args),
        Command::Compare(args) => compare::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Completions(args) => shell::completions(&args),
        Command::Man => shell::man(),
        Command::Worker(args) => worker::run(&args),
        Command::Serve(args) => serve::run(&args),
    };
    ExitCode::from(code)
}

/// Which jobs of a plan: shared by `plan` and `run`.
#[derive(clap::Args)]
pub struct SelectArgs {
    /// Keep jobs matching KEY=GLOB[,GLOB|GLOB] or KEY!=GLOB (keys: model, mesh, level,
    /// mutation, dtype, name) or a bare GLOB on the job name; terms combine with `and`, `or`,
    /// `not` and parentheses ('mesh=tp* or (level=oracle and not dtype=bf16)'). Repeatable; all
    /// must hold. Dependencies of the kept jobs come along.
    #[arg(long, short = 'f', value_name = "FILTER")]
    pub filter: Vec<String>,
    /// One shard of the filtered jobs: hash:M/N (stable) or count:M/N (balanced).
    #[arg(long, value_name = "KIND:M/N")]
    pub partition: Option<meshparity_runner::Partition>,
    /// Run every model on DEVICE: cpu, gpu (the first GPU) or gpu:N (see `meshparity list
    /// devices`), whatever the spec says. Jobs and tolerance tables follow the device.
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<Device>,
    /// Refuse a spec that plans more jobs than N (counted from its matrix before planning).
    #[arg(long, value_name = "N", default_value_t = meshparity_runner::plan::size::MAX_JOBS)]
    pub max_jobs: u64,
}

impl SelectArgs {
    /// `Err` (printed) when the spec plans more jobs than `--max-jobs`.
    pub fn check_size(&self, spec: &meshparity_specs::Spec) -> Result<(), ()> {
        meshparity_runner::plan::size::check(spec, self.max_jobs).map_err(|e| {
            say!("error: {e}");
        })
    }

    /// The parsed filter, or the message to print.
    pub fn filter(&self) -> Result<meshparity_runner::Filter, String> {
        meshparity_runner::Filter::parse(&self.filter).map_err(|e| e.to_string())
    }
}

/// After "nothing selected": why, where a filter's value matches nothing in the plan
/// (` (`level=oracel` matches no job's level: did you mean `oracle`?)`), else nothing.
pub fn hint(plan: &meshparity_runner::Plan, select: &SelectArgs) -> String {
    let Ok(filter) = select.filter() else {
        return String::new();
    };
    let jobs: Vec<&meshparity_runner::Job> = plan.graph.node_weights().collect();
    let hints = filter.hints(&jobs);
    if hints.is_empty() {
        String::new()
    } else {
        format!(" ({})", hints.join("; "))
    }
}

/// Colors only for a person at a terminal, and never when NO_COLOR is set.
pub fn color() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Load a spec (every model moved to `device` when one is given), printing its problems (and
/// warnings) to stderr.
pub fn load_spec(path: &Path, device: Option<Device>) -> Option<Loaded> {
    let loaded = meshparity_specs::load(path);
    let loaded = match device {
        Some(d) => loaded.and_then(|l| l.with_device(d)),
        None => loaded,
    };
    match loaded {
        Ok(loaded) => {
            if !loaded.warnings.is_empty() {
                console::stderr(format_args!("{}", loaded.warnings.render(color())));
            }
            Some(loaded)
        }
        Err(SpecError::Invalid(diags)) => {
            console::stderr(format_args!("{}", diags.render(color())));
            say!(
                "{}: {} error(s), {} warning(s)",
                path.display(),
                diags.error_count(),
                diags.warning_count()
            );
            None
        }
        Err(e @ SpecError::Read { .. }) => {
            say!("error: {e}");
            None
        }
    }
}

/// Whether the engine computes every cell `selection` has jobs in (every cell without one);
/// if not, its errors are printed as spec errors are.
pub fn supported(
    path: &Path,
    loaded: &Loaded,
    selection: Option<(&meshparity_runner::Plan, &meshparity_runner::Selection)>,
) -> bool {
    match crate::engines::check_support(loaded, selection) {
        Ok(()) => true,
        Err(SpecError::Invalid(diags)) => {
            console::stderr(format_args!("{}", diags.render(color())));
            say!(
                "{}: {} error(s), {} warning(s)",
                path.display(),
                diags.error_count(),
                diags.warning_count()
            );
            false
        }
        Err(e) => {
            say!("error: {e}");
            false
        }
    }
}

pub fn display(path: &Path) -> String {
    PathBuf::from(path).to_string_lossy().replace('\\', "/")
}
