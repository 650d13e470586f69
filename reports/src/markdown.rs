//! A Markdown summary for a CI step summary or a pull-request comment: counts, then every job
//! that did not pass with its reason, linked to its section of the HTML report.

use crate::model::{RunResults, Status};
use crate::view::{anchor, figure};

/// `html` is where the HTML report will be reachable from the reader (a relative path or URL).
pub fn markdown(results: &RunResults, html: &str) -> String {
    let m = &results.meta;
    let mut out = format!("## meshparity: {}\n\n", escape(&m.spec_name));
    let all_passed = results.jobs.iter().all(|j| j.status.passed());
    out.push_str(if all_passed {
        "✅ every job passed\n\n"
    } else {
        "❌ some jobs did not pass\n\n"
    });
    out.push_str("| status | jobs |\n|---|---:|\n");
    for s in Status::ALL {
        let n = results.count(s);
        if n > 0 {
            out.push_str(&format!("| {} | {n} |\n", s.as_str()));
        }
    }
    out.push_str(&format!("| **total** | **{}** |\n\n", results.jobs.len()));
    not_passed(&mut out, results, html);
    notes(&mut out, results, html);
    mutations(&mut out, results);
    performance(&mut out, results, html);
    let skipped = results.count(Status::Skipped);
    if skipped > 0 {
        out.push_str(&format!(
            "{skipped} job(s) skipped because a dependency did not pass.\n\n"
        ));
    }
    let disk = m
        .disk_bytes
        .map(|b| format!(" · run directory {}", crate::size(b)))
        .unwrap_or_default();
    out.push_str(&format!(
        "<sub>{} · {} ({}) · seed {} · {:.1} s{disk} · meshparity {}</sub>\n",
        escape(&m.host),
        escape(&m.backend),
        escape(&m.device),
        m.seed,
        m.seconds,
        escape(&m.meshparity_version)
    ));
    out
}

/// The jobs that failed or errored, each linked to its section of the HTML report.
fn not_passed(out: &mut String, results: &RunResults, html: &str) {
    let bad: Vec<_> = results
        .jobs
        .iter()
        .filter(|j| !j.status.passed() && j.status != Status::Skipped)
        .collect();
    if bad.is_empty() {
        return;
    }
    out.push_str("### Not passed\n\n| job | status | why |\n|---|---|---|\n");
    for j in bad {
        out.push_str(&format!(
            "| [{}]({}) | {} | {} |\n",
            escape(&j.name),
            link(html, &anchor(j)),
            j.status.as_str(),
            escape(&j.summary)
        ));
    }
    out.push('\n');
}

/// The run's notes, each with its count and first job.
fn notes(out: &mut String, results: &RunResults, html: &str) {
    let notes = crate::notes::notes(results);
    if notes.is_empty() {
        return;
    }
    out.push_str("### Notes\n\n");
    for n in notes {
        out.push_str(&format!(
            "- {} ({} job(s), first [{}]({}))\n",
            escape(&n.text),
            n.jobs,
            escape(&n.first_job),
            link(html, &n.anchor)
        ));
    }
    out.push('\n');
}

/// The performance figures, reported side by side and not gated.
fn performance(out: &mut String, results: &RunResults, html: &str) {
    let perf = crate::performance::rows(results);
    if perf.is_empty() {
        return;
    }
    out.push_str("### Performance (reported, not gated)\n\n");
    if results.meta.device.starts_with("cpu") {
        out.push_str(
            "On a CPU these ratios say little about a cluster: a mesh's ranks share this \
             machine's cores.\n\n",
        );
    }
    out.push_str("| job | metric | reference | candidate | ratio |\n|---|---|---:|---:|---:|\n");
    for r in perf {
        out.push_str(&format!(
            "| [{}]({}) | {} | {} | {} | {} |\n",
            escape(&r.job),
            link(html, &r.anchor),
            escape(&r.metric),
            figure(r.reference),
            figure(r.candidate),
            r.ratio.map_or_else(|| "—".into(), |x| format!("{x:.3}×"))
        ));
    }
    out.push('\n');
}

/// The link to a job's section of the HTML report: `HTML#job-…`, or the link as given when
/// it already has a fragment (`…/actions/runs/N#artifacts`: the report is in an artifact, and
/// `…#artifacts#job-…` pointed nowhere).
fn link(html: &str, anchor: &str) -> String {
    if html.contains('#') {
        html.to_owned()
    } else {
        format!("{html}#{anchor}")
    }
}

/// Text safe inside a Markdown table cell: no pipes, no newlines, no HTML, no control
/// characters, no link syntax.
fn escape(s: &str) -> String {
    let s: String = s
        .chars()
        .filter(|c| !c.is_control() || *c == '\n')
        .collect();
    s.replace('\n', " ")
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "\\|")
        .replace('[', "\\[")
        .replace(']', "\\]")
}

/// What caught each mutation: one row per mutation ([`crate::mutations`]).
fn mutations(out: &mut String, results: &RunResults) {
    let rows = crate::mutations::rows(results);
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "### Mutations: what caught each\n\n| mutation | caught | first caught by | localized as injected |\n|---|---:|---|---:|\n",
    );
    for r in rows {
        let by: Vec<String> = r
            .first_caught_by
            .iter()
            .map(|(level, n)| format!("{level} ({n})"))
            .collect();
        let localized = if r.as_injected + r.elsewhere == 0 {
            "—".to_owned()
        } else {
            format!("{}/{}", r.as_injected, r.jobs)
        };
        out.push_str(&format!(
            "| `{}` | {}/{} | {} | {localized} |\n",
            escape(&r.mutation),
            r.caught,
            r.jobs,
            if by.is_empty() {
                "—".to_owned()
            } else {
                by.join(", ")
            },
        ));
    }
    out.push('\n');
}
