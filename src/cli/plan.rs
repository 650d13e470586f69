//! `meshparity plan SPEC`

use std::path::PathBuf;

use meshparity_runner::plan::render;
use meshparity_runner::{Filter, Partition, Plan};

use crate::exit;

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Dot,
    Json,
}

#[derive(clap::Args)]
pub struct Args {
    /// Spec file.
    spec: PathBuf,
    /// Keep jobs matching KEY=GLOB[,GLOB] or KEY!=GLOB (keys: model, mesh, level, mutation,
    /// dtype, name) or a bare GLOB on the job name. Repeatable; all must hold.
    #[arg(long, short = 'f', value_name = "FILTER")]
    filter: Vec<String>,
    /// Run one shard of the filtered jobs: hash:M/N (stable) or count:M/N (balanced).
    /// Dependencies of the shard's jobs come along.
    #[arg(long, value_name = "KIND:M/N")]
    partition: Option<Partition>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

pub fn run(args: &Args) -> u8 {
    let filter = match Filter::parse(&args.filter) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::SPEC_ERROR;
        }
    };
    let Some(loaded) = super::load_spec(&args.spec) else {
        return exit::SPEC_ERROR;
    };
    let plan = Plan::build(&loaded.spec);
    let sel = plan.select(&filter, args.partition);
    let source = super::display(&args.spec);
    let out = match args.format {
        Format::Text => render::text(&plan, &sel, &source),
        Format::Dot => render::dot(&plan, &sel),
        Format::Json => render::json(&plan, &sel, &source),
    };
    print!("{out}");
    if sel.is_empty() {
        eprintln!("nothing selected: no job matches the filters and partition");
        return exit::NOTHING_SELECTED;
    }
    exit::OK
}
