//! Job errors that show their cause (issue 35 item 4), on the real binary: a failed program's
//! first error line in the job's summary and its traceback quoted whole in the record, however
//! much output came after; a localization whose traced rerun crashed recorded in the result and
//! the reports, instead of a pass-through "caught" with the error only in stderr.log.

#[macro_use]
mod common;

use common::harness::{engine_spec, fixture, meshparity, results};

/// A program whose cause is its second line, followed by a rank's traceback and 100 lines of
/// launcher noise: the summary names the cause, the record keeps the traceback.
#[test]
fn a_failed_programs_summary_names_the_cause_not_the_last_lines() {
    let line = r#"echo starting; echo "/usr/bin/python3: cannot open file /x/train.py: [Errno 2] No such file or directory" >&2; printf '[rank1]: Traceback (most recent call last):\n[rank1]:   File "/x/m.py", line 3\n[rank1]:     import nothing\n[rank1]: ModuleNotFoundError: nothing\n' >&2; for i in $(seq 100); do echo launcher noise $i; done; exit 1"#;
    let engine = format!(
        "program = \"sh\"\nargs = ['-c', '''{line}''']\n{}",
        common::harness::CURVE_MAP
    );
    let fx = fixture(&engine_spec(&engine, "", r#"["curve"]"#));
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .output()
        .unwrap();
    let r = results(&fx.path().join("run"));
    assert_eq!(out.status.code(), Some(3), "{r:#}");
    let job = &r["jobs"][0];
    assert_eq!(job["status"], "error", "{job:#}");
    let summary = job["summary"].as_str().unwrap();
    assert!(
        summary.contains("first error line of its output: /usr/bin/python3: cannot open file"),
        "{summary}"
    );
    let tail = job["attempts"][0]["log_tail"].as_str().unwrap();
    assert!(
        tail.contains("the Python traceback:") && tail.contains("[rank1]:     import nothing"),
        "{tail}"
    );
}

/// A mesh whose loss differs fails its curve; the traced rerun that localizes it crashes: the
/// verdict stands and its summary says the localization failed and why.
#[test]
fn a_crashed_localization_is_recorded_not_dropped() {
    let line = r#"if [ -n "{{trace_dir}}" ]; then echo "RuntimeError: the trace writer crashed" >&2; exit 1; fi; for s in 1 2; do echo "{\"step\": $s, \"loss\": 2.${s}{{world_size}}}"; done > m.jsonl"#;
    let engine = format!(
        "program = \"sh\"\nargs = ['-c', '{line}']\ncwd = \"{{{{out_dir}}}}\"\n\
         artifacts = {{ curve = \"m.jsonl\", trace = \"trace\" }}"
    );
    let fx = fixture(&engine_spec(&engine, "", r#"["curve"]"#));
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .output()
        .unwrap();
    let run = fx.path().join("run");
    let r = results(&run);
    assert_eq!(out.status.code(), Some(1), "{r:#}");
    let job = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"].as_str().unwrap().ends_with("/curve"))
        .unwrap();
    assert_eq!(job["status"], "failed", "{job:#}");
    let summary = job["summary"].as_str().unwrap();
    assert!(
        summary.contains("localization failed:") && summary.contains("exited with 1"),
        "{summary}"
    );
    let md = std::fs::read_to_string(run.join("summary.md")).unwrap();
    assert!(md.contains("localization failed:"), "{md}");
}
