//! The HTML report in a real browser: headless Chromium loads the file, runs its script and
//! dumps the DOM; the grid cells, failure details and loss-curve SVG must be there, the page
//! must work with JavaScript off, and hostile job text must not become elements.

mod common;

use std::process::Command;

use meshparity_reports::html::html;
use meshparity_reports::Status;

/// The DOM after load, as Chromium serializes it.
fn dump_dom(page: &str, javascript: bool) -> Option<String> {
    if !common::available("chromium", &["--version"], "apt-get install chromium") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    // JavaScript off: the same page without its script (Chromium's --dump-dom needs scripting).
    let page = if javascript {
        page.to_owned()
    } else {
        let (a, b) = (
            page.find("<script>").unwrap(),
            page.find("</script>").unwrap(),
        );
        format!("{}{}", &page[..a], &page[b + "</script>".len()..])
    };
    let path = common::write(dir.path(), "report.html", &page);
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--dump-dom",
    ])
    .arg(format!(
        "--user-data-dir={}",
        dir.path().join("profile").display()
    ));
    let out = cmd
        .arg(format!("file://{}", path.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

#[test]
fn grid_failures_and_curves_render_in_chromium() {
    let r = common::results(false);
    let Some(dom) = dump_dom(&html(&r), true) else {
        return;
    };
    let in_grid = r.jobs.iter().filter(|j| j.mesh.is_some()).count();
    let grid = &dom[dom.find("id=\"grid\"").unwrap()..dom.find("</table>").unwrap()];
    assert_eq!(
        grid.matches("<a class=\"s-").count(),
        in_grid,
        "one grid cell item per job"
    );
    assert!(
        grid.contains("class=\"s-failed\""),
        "failed cells are coloured as such"
    );
    let failed = r
        .jobs
        .iter()
        .find(|j| j.name == "tiny@f32/tp2/oracle")
        .unwrap();
    let section = format!("id=\"failure-job-{}\"", failed.id);
    assert!(
        dom.contains(&section),
        "failures are listed first, expanded"
    );
    assert!(dom.contains("17 of 4096 element(s) outside allclose"));
    assert!(
        dom.contains("layers.0.mlp.down.weight"),
        "worst-tensor table"
    );
    assert!(
        dom.contains("meshparity run spec.toml --filter 'name=tiny@f32/tp2/oracle'"),
        "reproduce command"
    );
    assert_eq!(
        dom.matches("<polyline").count(),
        3,
        "oracle and mesh loss curves, and their difference on a log axis of its own"
    );
    assert!(
        dom.contains("<svg class=\"curve-diff\""),
        "the difference panel"
    );
    assert!(dom.contains("|mesh − oracle| / |oracle|"), "its caption");
    assert!(
        dom.contains("<div id=\"filters\">"),
        "the script shows the filters"
    );
    let failures = r.count(Status::Failed) + r.count(Status::Error) + r.count(Status::Timeout);
    assert_eq!(dom.matches("id=\"failure-job-").count(), failures);
    // Performance figures side by side, linked to their job; gated metrics are not figures.
    let perf = &dom[dom
        .find("<table class=\"performance\">")
        .expect("the table")..];
    let perf = &perf[..perf.find("</table>").unwrap()];
    assert!(
        perf.contains("<td>step_time_s</td><td>0.25</td><td>0.3</td><td>1.200×</td>"),
        "{perf}"
    );
    assert!(!perf.contains("<td>loss</td>"), "{perf}");
}

#[test]
fn the_report_reads_without_javascript() {
    let r = common::results(false);
    let Some(dom) = dump_dom(&html(&r), false) else {
        return;
    };
    assert!(
        dom.contains("<div id=\"filters\" hidden=\"\">"),
        "filters stay hidden without JS"
    );
    for job in &r.jobs {
        assert!(
            dom.contains(&format!("id=\"job-{}\"", job.id)),
            "{} has its anchor",
            job.name
        );
    }
}

#[test]
fn hostile_job_text_never_becomes_markup() {
    let r = common::results(true);
    let page = html(&r);
    assert!(!page.contains('\u{1b}') && !page.contains('\u{7}'));
    let Some(dom) = dump_dom(&page, true) else {
        return;
    };
    assert_eq!(
        dom.matches("<script").count(),
        1,
        "only the report's own script"
    );
    assert!(!dom.contains("<img"), "no injected element");
    assert!(
        dom.contains("&lt;script&gt;alert('x')&lt;/script&gt;"),
        "the text is shown, escaped"
    );
    assert!(dom.contains("]]&gt;"));
}

/// A 10,000-job sweep: the page condenses (counts per matrix cell, only jobs that did not pass
/// in detail), stays small, and opens in headless Chromium in seconds.
#[test]
fn a_ten_thousand_job_report_stays_small_and_opens_in_chromium_quickly() {
    let mut results = common::results(false);
    let template = results.jobs.clone();
    results.jobs.clear();
    for i in 0..10_000 {
        let mut j = template[i % template.len()].clone();
        j.id = format!("{i:016x}");
        j.name = format!("{}#{i}", j.name);
        j.model = format!("m{}", i % 200);
        results.jobs.push(j);
    }
    let page = html(&results);
    assert!(page.len() < 4 << 20, "{} bytes", page.len());
    // Chromium's own start, to tell it from the page's cost.
    let start = std::time::Instant::now();
    if dump_dom("<!doctype html><title>empty</title><script></script>", true).is_none() {
        return;
    }
    let empty = start.elapsed().as_secs_f64();
    let start = std::time::Instant::now();
    let dom = dump_dom(&page, true).expect("chromium ran a moment ago");
    let seconds = start.elapsed().as_secs_f64();
    assert!(
        seconds < 5.0,
        "Chromium took {seconds:.1} s (an empty page {empty:.1} s)"
    );
    assert!(dom.contains("id=\"condensed\""), "no condensed note");
    assert!(dom.contains("10000 jobs"), "no job count");
    let not_passed = results.jobs.iter().filter(|j| !j.status.passed()).count();
    assert!(not_passed > 0);
    eprintln!(
        "10,000 jobs: {} KB of HTML, opened in {seconds:.2} s (an empty page: {empty:.2} s)",
        page.len() / 1024
    );
}
