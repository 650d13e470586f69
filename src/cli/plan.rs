//! `meshparity plan SPEC`

use std::path::PathBuf;

use meshparity_runner::plan::render;
use meshparity_runner::Plan;

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
    #[command(flatten)]
    select: super::SelectArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

pub fn run(args: &Args) -> u8 {
    let filter = match args.select.filter() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::SPEC_ERROR;
        }
    };
    let Some(loaded) = super::load_spec(&args.spec, args.select.device) else {
        return exit::SPEC_ERROR;
    };
    if args.select.check_size(&loaded.spec).is_err() {
        return exit::SPEC_ERROR;
    }
    let plan = Plan::build(&loaded.spec);
    let sel = plan.select(&filter, args.select.partition);
    if !super::supported(&args.spec, &loaded, Some((&plan, &sel))) {
        return exit::SPEC_ERROR;
    }
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
