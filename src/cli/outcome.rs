//! How a run ended, for a person and for a shell: the final table (counts, then every job that
//! did not pass) and the exit code (`run`'s and `report --merge`'s).

use meshparity_reports::{RunResults, Status};

use crate::exit;

/// The exit code of a run with these results (also `report --merge`'s).
pub(crate) fn code(r: &RunResults) -> u8 {
    if r.meta.interrupted {
        exit::INTERRUPTED
    } else if r.count(Status::Failed) > 0 {
        exit::CHECK_FAILED
    } else if r.count(Status::Error) + r.count(Status::Timeout) > 0 {
        exit::INFRA_ERROR
    } else if r.jobs.iter().all(|j| j.status.passed()) {
        exit::OK
    } else {
        exit::CHECK_FAILED
    }
}

/// The final table: counts, then every job that did not pass.
pub(crate) fn summary(r: &RunResults) -> String {
    let mut out = String::new();
    // Jobs that never ran are counted, not listed again: the progress lines named each.
    let bad: Vec<_> = r
        .jobs
        .iter()
        .filter(|j| !j.status.passed() && j.status != Status::NotRun)
        .collect();
    if !bad.is_empty() {
        out.push_str("\nnot passed:\n");
        for j in &bad {
            out.push_str(&format!(
                "  {:<8} {}  {}\n",
                j.status.as_str(),
                meshparity_files::text::one_line(&j.name),
                meshparity_files::text::continued(
                    &j.summary,
                    meshparity_runner::exec::progress::GUTTER
                )
            ));
        }
    }
    let counts: Vec<String> = Status::ALL
        .iter()
        .filter(|s| r.count(**s) > 0)
        .map(|s| format!("{} {}", r.count(*s), s.as_str()))
        .collect();
    let disk = r
        .meta
        .disk_bytes
        .map(|b| format!("; run directory {}", meshparity_reports::size(b)))
        .unwrap_or_default();
    let counts = if counts.is_empty() {
        "none in this run".to_owned()
    } else {
        counts.join(", ")
    };
    out.push_str(&format!(
        "\n{} job(s) in {:.1}s: {counts}{disk}\n",
        r.jobs.len(),
        r.meta.seconds,
    ));
    out
}
