//! `meshparity report RESULTS.json`: render the reports of a finished (or interrupted) run
//! again, or into other places; `--merge` combines the results of `--partition` shards into
//! one run first.

use std::path::{Path, PathBuf};

use meshparity_reports::{files, html, junit, markdown, write, RunResults, FORMAT_VERSION};

use crate::exit;

#[derive(clap::Args)]
pub struct Args {
    /// A run's results.json (with --merge: every shard's).
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// Merge the shards' results into one run (each job once, from the shard that selected
    /// it) and write results.json and every report into --out.
    #[arg(long, requires = "out")]
    merge: bool,
    /// Where --merge writes (created if need be).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// JUnit XML output. Naming any of --junit, --html, --markdown writes only those; naming
    /// none writes all three beside the results (junit.xml, report.html, summary.md).
    #[arg(long)]
    junit: Option<PathBuf>,
    /// HTML output.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Markdown summary output.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Where the Markdown links to the HTML report (default: the HTML path as given).
    #[arg(long, value_name = "URL")]
    html_link: Option<String>,
}

/// A run's results, parsed as they are read: the file's bytes are never all in memory beside
/// what they parse into (a release sweep's results.json can be most of a gigabyte).
pub(crate) fn read(path: &Path) -> Result<RunResults, String> {
    let results: RunResults = meshparity_files::open_limited(path, meshparity_files::Limit::JSON)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            let reader = std::io::BufReader::with_capacity(1 << 20, f);
            serde_json::from_reader(reader).map_err(|e| e.to_string())
        })
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if results.format_version != FORMAT_VERSION {
        return Err(format!(
            "{} has format version {}; this meshparity reads version {FORMAT_VERSION}",
            path.display(),
            results.format_version
        ));
    }
    Ok(results)
}

pub fn run(args: &Args) -> u8 {
    if args.results.len() > 1 && !args.merge {
        eprintln!("error: several results files need --merge (and --out DIR)");
        return exit::SPEC_ERROR;
    }
    let shards: Result<Vec<RunResults>, String> = args.results.iter().map(|p| read(p)).collect();
    let mut shards = match shards {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::SPEC_ERROR;
        }
    };
    let (results, dir) = if args.merge {
        let out = args.out.clone().expect("clap requires --out with --merge");
        let merged = match meshparity_reports::merge::merge(shards) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("error: {e}");
                return exit::SPEC_ERROR;
            }
        };
        let path = out.join(files::RESULTS);
        let written = write::atomic_with(&path, |w| {
            serde_json::to_writer_pretty(w, &merged).map_err(std::io::Error::other)
        });
        if let Err(e) = written {
            eprintln!("error: writing {}: {e}", path.display());
            return exit::INFRA_ERROR;
        }
        println!("{}", path.display());
        (merged, out)
    } else {
        let dir = args.results[0]
            .parent()
            .unwrap_or(Path::new("."))
            .to_owned();
        (shards.remove(0), dir)
    };
    let dir = dir.as_path();
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
    // Asked for one report elsewhere: leave the run's own reports alone.
    let all = args.junit.is_none() && args.html.is_none() && args.markdown.is_none();
    let wanted = [
        (all || args.junit.is_some(), &j),
        (all || args.html.is_some(), &h),
        (all || args.markdown.is_some(), &m),
    ];
    let render: [&dyn Fn() -> String; 3] = [
        &|| junit::junit(&results),
        &|| html::html(&results),
        &|| markdown::markdown(&results, &link),
    ];
    for ((want, path), render) in wanted.into_iter().zip(render) {
        if !want {
            continue;
        }
        let text = render();
        if let Err(e) = write::atomic(path, text.as_bytes()) {
            eprintln!("error: writing {}: {e}", path.display());
            return exit::INFRA_ERROR;
        }
        println!("{}", path.display());
    }
    // A merged run exits as the run would have: a CI step that merges failing shards fails;
    // shards that all came up empty merged nothing, as the unsharded run would have selected
    // nothing.
    if args.merge && results.jobs.is_empty() {
        eprintln!("nothing selected: no shard has a job (the filters leave none in the plan)");
        return exit::NOTHING_SELECTED;
    }
    if args.merge {
        // The shards' own steps annotated their failures; the merge shows the whole summary.
        let summary_link = args
            .html_link
            .clone()
            .unwrap_or_else(|| super::ci::report_link(&link));
        super::ci::step_summary(&markdown::markdown(&results, &summary_link));
        return super::outcome::code(&results);
    }
    exit::OK
}
