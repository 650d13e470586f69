//! Where CI systems look: GitHub Actions' step summary and its annotations.
//!
//! A run (and a merge of shards) appends its Markdown summary to the file `GITHUB_STEP_SUMMARY`
//! names, so the job's page shows it without a `cat` step; under GitHub Actions
//! (`GITHUB_ACTIONS=true`) each job that did not pass prints an `::error` workflow command at
//! the spec line of its mesh (or model), with the one-line message and the reproduce line, so
//! the failure is annotated on the spec in the pull request. GitLab reads the JUnit report,
//! whose failure text carries the same (reports/src/junit.rs).
//!
//! The annotation's text comes from job summaries, which quote a program's output: control
//! characters are escaped first, then the workflow-command encoding (`%`, `\r`, `\n`; `:` and
//! `,` in properties) keeps any text from closing the command or starting another.

use std::io::Write;

use meshparity_reports::{JobRecord, RunResults, Status};
use meshparity_specs::Spec;

/// Where a step summary's job links go: the workflow run's artifacts under GitHub Actions
/// (the report is uploaded there; `report.html` beside the summary resolves to nothing on the
/// run's page), else `fallback`.
pub fn report_link(fallback: &str) -> String {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        var("GITHUB_SERVER_URL"),
        var("GITHUB_REPOSITORY"),
        var("GITHUB_RUN_ID"),
    ) {
        (Some(server), Some(repo), Some(run)) => {
            format!("{server}/{repo}/actions/runs/{run}#artifacts")
        }
        _ => fallback.to_owned(),
    }
}

/// GitHub shows at most this much of a step summary (1 MiB); past it the summary is cut.
const SUMMARY_LIMIT: usize = 1 << 20;

/// GitHub shows the first 10 error annotations of a step; a few more are printed, then a count.
const ANNOTATIONS: usize = 20;

/// Append `markdown` to `GITHUB_STEP_SUMMARY` where it is set. A failure is a warning: the run's
/// reports are written either way.
pub fn step_summary(markdown: &str) {
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) else {
        return;
    };
    let text = cut(markdown, SUMMARY_LIMIT - 200);
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = written {
        meshparity_runner::say!(
            "warning: cannot append the summary to GITHUB_STEP_SUMMARY ({}): {e}",
            std::path::Path::new(&path).display()
        );
    }
}

/// `text` within `limit` bytes, cut at a line and said so.
fn cut(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = text[..end].rfind('\n').map_or(end, |i| i + 1);
    format!(
        "{}\n\n_The summary is cut here (GitHub shows 1 MiB); report.html has all of it._\n",
        &text[..end]
    )
}

/// Under GitHub Actions, one `::error` line on stdout per job that did not pass (skipped and
/// not-run jobs excepted: their cause has its own), at `spec`'s line for the job when known.
pub fn annotations(results: &RunResults, spec: Option<&Spec>) {
    if std::env::var("GITHUB_ACTIONS").ok().as_deref() != Some("true") {
        return;
    }
    let bad: Vec<&JobRecord> = results
        .jobs
        .iter()
        .filter(|j| matches!(j.status, Status::Failed | Status::Error | Status::Timeout))
        .collect();
    let mut out = String::new();
    for job in bad.iter().take(ANNOTATIONS) {
        out.push_str(&annotation(job, spec, &results.meta.spec));
        out.push('\n');
    }
    if bad.len() > ANNOTATIONS {
        out.push_str(&format!(
            "::warning title=meshparity::{} more job(s) did not pass; the step summary and \
             report.html list every one\n",
            bad.len() - ANNOTATIONS
        ));
    }
    meshparity_runner::exec::console::stdout(format_args!("{out}"));
}

/// One `::error` workflow command for `job`.
pub fn annotation(job: &JobRecord, spec: Option<&Spec>, spec_path: &str) -> String {
    let mut props = Vec::new();
    match spec.and_then(|s| place(s, job)) {
        Some((file, line)) => {
            props.push(format!("file={}", property(&file)));
            props.push(format!("line={line}"));
        }
        None if !spec_path.is_empty() => props.push(format!("file={}", property(spec_path))),
        None => {}
    }
    props.push(format!(
        "title={}",
        property(&format!("meshparity: {} {}", job.name, job.status.as_str()))
    ));
    let mut message = meshparity_reports::junit::headline(&job.summary);
    if !job.reproduce.is_empty() {
        message.push_str(&format!(
            "\nreproduce (in the run directory): {}",
            job.reproduce
        ));
    }
    format!("::error {}::{}", props.join(","), data(&message))
}

/// The spec file and line of `job`'s mesh, or of its model for a job without one.
fn place(spec: &Spec, job: &JobRecord) -> Option<(String, usize)> {
    let loc = match &job.mesh {
        Some(m) => &spec.meshes.get(m)?.name.loc,
        None => &spec.models.get(&job.model)?.name.loc,
    };
    let (line, _) = loc.file.line_col(loc.range.start);
    Some((loc.file.display_path(), line))
}

/// A workflow command's message: `%`, `\r` and `\n` encoded (GitHub's grammar), control
/// characters shown escaped before that.
fn data(s: &str) -> String {
    meshparity_files::text::escaped(s)
        .replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value: as [`data`], and `:` and `,` encoded too.
fn property(s: &str) -> String {
    data(&meshparity_files::text::one_line(s))
        .replace(':', "%3A")
        .replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No text, whatever it holds, closes the command or starts a line of its own.
    #[test]
    fn hostile_text_stays_inside_its_annotation() {
        let s = "a\n::error::forged\r,b:c%\x1b[2J";
        assert_eq!(data(s), "a%0A::error::forged\\r,b:c%25\\x1b[2J");
        assert_eq!(
            property(s),
            "a\\n%3A%3Aerror%3A%3Aforged\\r%2Cb%3Ac%25\\x1b[2J"
        );
        assert!(!data(s).contains('\n') && !property(s).contains('\n'));
        let long = "x\n".repeat(1000);
        let cut = cut(&long, 100);
        assert!(cut.len() < 300 && cut.contains("is cut here"), "{cut}");
    }
}
