//! `meshparity report RESULTS.json`: render the reports of a finished (or interrupted) run
//! again, or into other places.

use std::path::{Path, PathBuf};

use meshparity_reports::{files, html, junit, markdown, write, RunResults, FORMAT_VERSION};

use crate::exit;

#[derive(clap::Args)]
pub struct Args {
    /// A run's results.json.
    results: PathBuf,
    /// JUnit XML output (default: junit.xml beside the results).
    #[arg(long)]
    junit: Option<PathBuf>,
    /// HTML output (default: report.html beside the results).
    #[arg(long)]
    html: Option<PathBuf>,
    /// Markdown summary output (default: summary.md beside the results).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Where the Markdown links to the HTML report (default: the HTML path as given).
    #[arg(long, value_name = "URL")]
    html_link: Option<String>,
}

pub fn run(args: &Args) -> u8 {
    let results: RunResults = match std::fs::read(&args.results)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}: {e}", args.results.display());
            return exit::SPEC_ERROR;
        }
    };
    if results.format_version != FORMAT_VERSION {
        eprintln!(
            "error: {} has format version {}; this meshparity reads version {FORMAT_VERSION}",
            args.results.display(),
            results.format_version
        );
        return exit::SPEC_ERROR;
    }
    let dir = args.results.parent().unwrap_or(Path::new("."));
    let pick = |p: &Option<PathBuf>, name: &str| p.clone().unwrap_or_else(|| dir.join(name));
    let (j, h, m) = (
        pick(&args.junit, files::JUNIT),
        pick(&args.html, files::HTML),
        pick(&args.markdown, files::MARKDOWN),
    );
    let link = args.html_link.clone().unwrap_or_else(|| {
        // Relative to the Markdown file when both sit in one directory.
        if h.parent() == m.parent() {
            h.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            h.display().to_string()
        }
    });
    for (path, text) in [
        (&j, junit::junit(&results)),
        (&h, html::html(&results)),
        (&m, markdown::markdown(&results, &link)),
    ] {
        if let Err(e) = write::atomic(path, text.as_bytes()) {
            eprintln!("error: writing {}: {e}", path.display());
            return exit::INFRA_ERROR;
        }
        println!("{}", path.display());
    }
    exit::OK
}
