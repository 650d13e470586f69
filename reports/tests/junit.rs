//! JUnit XML as CI consumes it: a snapshot of a fixed result set, validation with xmllint
//! against the project's relaxed JUnit schema, totals read back by Python's junitparser, and
//! hostile job output that still yields well-formed, valid XML.

mod common;

use std::process::Command;

use meshparity_reports::junit::junit;
use meshparity_reports::Status;

#[test]
fn junit_snapshot() {
    insta::assert_snapshot!(junit(&common::results(false)));
}

#[test]
fn counts_add_up() {
    let r = common::results(false);
    let xml = junit(&r);
    let failed = r.count(Status::Failed);
    let errors = r.count(Status::Error) + r.count(Status::Timeout);
    assert!(
        xml.contains(&format!(
            "tests=\"{}\" failures=\"{failed}\" errors=\"{errors}\"",
            r.jobs.len()
        )),
        "{xml}"
    );
    let skipped = r.count(Status::Skipped) + r.count(Status::NotRun);
    assert!(xml.contains(&format!("skipped=\"{skipped}\"")));
}

fn xmllint(xml: &str) {
    if !common::available("xmllint", &["--version"], "apt-get install libxml2-utils") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = common::write(dir.path(), "junit.xml", xml);
    let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/junit.xsd");
    let out = Command::new("xmllint")
        .args(["--noout", "--schema", schema])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{xml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn valid_against_the_relaxed_schema() {
    xmllint(&junit(&common::results(false)));
}

#[test]
fn hostile_job_output_stays_valid_xml() {
    let xml = junit(&common::results(true));
    assert!(
        !xml.contains('\u{1b}') && !xml.contains('\u{7}'),
        "control characters leaked"
    );
    assert!(!xml.contains("<script>"), "markup leaked unescaped");
    xmllint(&xml);
}

#[test]
fn junitparser_reads_the_same_totals() {
    if !common::available(
        "python3",
        &["-c", "import junitparser"],
        "pip install junitparser",
    ) {
        return;
    }
    for hostile in [false, true] {
        let r = common::results(hostile);
        let dir = tempfile::tempdir().unwrap();
        let path = common::write(dir.path(), "junit.xml", &junit(&r));
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/consumers/junit_totals.py"
        );
        let out = Command::new("python3")
            .arg(script)
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let totals: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(totals["tests"], r.jobs.len());
        assert_eq!(totals["failures"], r.count(Status::Failed));
        assert_eq!(
            totals["errors"],
            r.count(Status::Error) + r.count(Status::Timeout)
        );
        assert_eq!(
            totals["skipped"],
            r.count(Status::Skipped) + r.count(Status::NotRun)
        );
        assert_eq!(
            totals["passed"],
            r.count(Status::Passed) + r.count(Status::Flaky)
        );
        assert_eq!(
            totals["unique_cases"],
            r.jobs.len(),
            "classname + name must be unique"
        );
    }
}

/// A hand-edited results file with absurd seconds still renders (no Duration panic).
#[test]
fn absurd_seconds_do_not_abort_the_report() {
    let mut r = common::results(false);
    r.meta.seconds = 1e308;
    r.jobs[0].seconds = f64::NAN;
    r.jobs[1].seconds = -5.0;
    r.jobs[2].attempts[0].seconds = f64::INFINITY;
    let xml = meshparity_reports::junit::junit(&r);
    assert!(xml.contains("<testsuites"), "{xml}");
}
