//! `meshparity validate SPEC...`

use std::path::PathBuf;

use meshparity_runner::{Filter, Plan};

use crate::exit;

#[derive(clap::Args)]
pub struct Args {
    /// Spec files to check.
    #[arg(required = true)]
    specs: Vec<PathBuf>,
}

pub fn run(args: &Args) -> u8 {
    let mut code = exit::OK;
    for path in &args.specs {
        match super::load_spec(path, None).filter(|l| super::supported(path, l, None)) {
            Some(loaded) => {
                let cap = meshparity_runner::plan::size::MAX_JOBS;
                if let Err(e) = meshparity_runner::plan::size::check(&loaded.spec, cap) {
                    eprintln!("{}: error: {e}", super::display(path));
                    code = exit::SPEC_ERROR;
                    continue;
                }
                let plan = Plan::build(&loaded.spec);
                let cells = loaded.spec.cells().len();
                let selected = plan.select(&Filter::default(), None);
                println!(
                    "{}: ok ({} models, {} meshes, {cells} cells, {} jobs{})",
                    super::display(path),
                    loaded.spec.models.len(),
                    loaded.spec.meshes.len(),
                    selected.jobs.len(),
                    match loaded.warnings.warning_count() {
                        0 => String::new(),
                        n => format!(", {n} warning(s)"),
                    }
                );
            }
            None => code = exit::SPEC_ERROR,
        }
    }
    code
}
