//! What a run's inputs, its reader and its own bulk can do to it, on the real binary (issue
//! 32): a reader that goes away loses no result, a run keeps on disk only what its reports
//! cite, a huge spec gets a bounded report, a plan over its cap is refused before it is built,
//! `--resume` recomputes what a cleared cache lost.

#[macro_use]
mod common;

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use common::harness::{files, fixture, meshparity, results};

/// One mesh, every level, two mutations that are caught and localized (a trace each).
const SPEC: &str = concat!(
    r#"
[run]
name = "small"
seed = 7
steps = 2
batch = 4
output = "out"
"#,
    tiny_model!(),
    r#"
[meshes.dp2]
dp = 2

[[matrix]]
models = ["tiny"]
levels = ["roundtrip", "forward", "curve", "oracle"]

[mutations]
select = ["dp-skip-grad-all-reduce", "dp-local-loss-normalization"]
"#
);

/// `run … 2>&1 | head -c 10`: the reader leaves after ten bytes; the run still computes every
/// job, writes its results and reports, and exits with its own code.
#[test]
fn a_reader_that_goes_away_loses_no_result() {
    let fx = fixture(SPEC);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_meshparity"))
        .current_dir(fx.path())
        .env_remove("MESHPARITY_TEST_FAULT")
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both pipes closed before the runner's first line.
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let r = results(&fx.path().join("run"));
    let jobs = r["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 8);
    assert!(jobs.iter().all(|j| j["status"] == "passed"), "{r:#}");
    for report in ["junit.xml", "report.html", "summary.md"] {
        assert!(fx.path().join("run").join(report).is_file(), "{report}");
    }
}

/// A judged job keeps the files its failed comparisons name (what its summary's `meshparity
/// compare` command reads) and its records; traces, a mutated run's shards and weights go, and
/// so does the reference trace its mutations shared. `--keep-artifacts` keeps all of it. The
/// summary says what the run directory holds.
#[test]
fn a_run_keeps_what_its_reports_cite_and_says_its_size() {
    let fx = fixture(SPEC);
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "lean"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("; run directory "), "{stdout}");
    let lean = fx.path().join("lean");
    let r = results(&lean);
    assert!(r["meta"]["disk_bytes"].as_u64().unwrap() > 0);
    let summary = std::fs::read_to_string(lean.join("summary.md")).unwrap();
    assert!(summary.contains("run directory"), "{summary}");

    let kept = files(&lean.join("jobs"));
    let names: Vec<String> = kept.iter().map(|p| p.display().to_string()).collect();
    assert!(
        !names
            .iter()
            .any(|n| n.contains("/trace/") || n.contains("/shards/")),
        "{names:#?}"
    );
    assert!(files(&lean.join("artifacts")).is_empty());
    // Each mutation's failed comparisons still name files that are there, in the run directory.
    for job in r["jobs"].as_array().unwrap() {
        if !job["name"].as_str().unwrap().contains("/mutation[") {
            continue;
        }
        let mut cited = 0;
        for level in job["detail"]["levels"].as_array().unwrap() {
            for c in level["comparisons"].as_array().unwrap() {
                if c["passed"] == false && c["reproduce"].as_str().is_some_and(|s| !s.is_empty()) {
                    for side in ["reference", "candidate"] {
                        // Relative to the run directory, which holds every file it cites.
                        let path = lean.join(c[side].as_str().unwrap());
                        assert!(path.is_file(), "{} cites {}", job["name"], path.display());
                        cited += 1;
                    }
                }
            }
        }
        assert!(cited > 0, "{} cites no file", job["name"]);
    }

    let full = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "full"])
        .arg("--keep-artifacts")
        .output()
        .unwrap();
    assert_eq!(full.status.code(), Some(0));
    let all = files(&fx.path().join("full/jobs"));
    assert!(
        all.len() > kept.len() + 10,
        "{} vs {}",
        all.len(),
        kept.len()
    );
    assert!(all
        .iter()
        .any(|p| p.display().to_string().contains("/trace/")));
    // The same verdicts, word for word but for the run directory's name (the second run's
    // engine runs reuse the first's cached artifacts).
    let verdicts = |r: &Value, dir: &str| -> Vec<(String, String)> {
        r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["detail"].get("artifacts").is_none())
            .map(|j| {
                let summary = j["summary"].as_str().unwrap().replace(dir, "RUN");
                (j["status"].as_str().unwrap().to_owned(), summary)
            })
            .collect()
    };
    let full = results(&fx.path().join("full"));
    assert_eq!(verdicts(&r, "/lean/"), verdicts(&full, "/full/"));
}

/// 100,000 exclude rules on one line, each an error: a bounded report (the first errors with a
/// window of their line, the rest counted), no panic past column 65,535, no gigabytes.
#[test]
fn a_spec_with_a_huge_line_of_errors_gets_a_bounded_report() {
    let rules: Vec<String> = (0..100_000)
        .map(|i| format!("{{ mesh = \"nope{i}\" }}"))
        .collect();
    let spec = concat!(
        "[run]\nname = \"long\"\n",
        tiny_model!(),
        "[meshes.dp2]\ndp = 2\n"
    )
    .to_owned()
        + "[[matrix]]\nmodels = [\"tiny\"]\nlevels = [\"forward\"]\nexclude = ["
        + &rules.join(", ")
        + "]\n";
    let fx = fixture(&spec);
    for cmd in ["validate", "plan", "run"] {
        let out = meshparity(fx.path())
            .args([cmd, "spec.toml"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{cmd}: {}",
            &err[..err.len().min(2000)]
        );
        assert!(err.len() < 100_000, "{cmd}: {} bytes of errors", err.len());
        assert!(err.contains("100000 error(s)"), "{cmd}");
        assert!(err.contains("and 199950 more"), "{cmd}");
        assert!(
            err.contains("characters long: shown around the column"),
            "{cmd}"
        );
    }
}

/// An include of a file that is not TOML text is refused without quoting it: the environment
/// of `/proc/self/environ` never reaches the error.
#[test]
fn an_include_that_is_not_text_is_refused_unquoted() {
    let fx = fixture("include = [\"/proc/self/environ\"]\n[run]\nname = \"x\"\n");
    let out = meshparity(fx.path())
        .env("MESHPARITY_PROBE_SECRET", "hunter2")
        .args(["validate", "spec.toml"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not a spec file"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

/// `--resume` after the cache was cleared: the passed trainings whose artifacts are gone run
/// again, and the jobs that need them pass; a directory that is not a run is refused untouched.
#[test]
fn resume_recomputes_what_a_cleared_cache_lost() {
    let fx = fixture(SPEC);
    let first = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        // The forward job fails as an infrastructure error, whatever the machine's speed (a
        // 1 ms timeout was met by a fast forward job on a quiet machine).
        .env("MESHPARITY_TEST_FAULT", "*/forward=exit:7")
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(3));
    std::fs::remove_dir_all(fx.path().join("out/cache")).unwrap();
    let resumed = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--resume", "run"])
        .output()
        .unwrap();
    let r = results(&fx.path().join("run"));
    assert_eq!(resumed.status.code(), Some(0), "{r:#}");
    assert!(r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["status"] == "passed"));

    let not_a_run = fx.path().join("notes");
    std::fs::create_dir(&not_a_run).unwrap();
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--resume", "notes"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        std::fs::read_dir(&not_a_run).unwrap().count(),
        0,
        "nothing written"
    );
}

/// A plan over the job cap is refused before it is built; absurd step counts are spec errors.
#[test]
fn plans_and_runs_have_stated_caps() {
    let fx = fixture(SPEC);
    for cmd in ["plan", "run"] {
        let out = meshparity(fx.path())
            .args([cmd, "spec.toml", "--max-jobs", "5"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains("plans up to 8 jobs, over the cap of 5"),
            "{cmd}: {err}"
        );
    }
    for (bad, want) in [
        ("steps = 1000000000", "at most 1000000 steps"),
        (
            "steps = 2\noracle_steps = 3",
            "`run.oracle_steps` (3) is more than the run's steps (2)",
        ),
    ] {
        let fx = fixture(&SPEC.replace("steps = 2", bad));
        let out = meshparity(fx.path())
            .args(["validate", "spec.toml"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
}

/// `compare` of curves with 100,000 metrics a line: linear in the metrics (it took 36 s, a
/// list searched per key); a hang guard, not a timing: it now takes well under a second.
#[test]
fn compare_handles_a_curve_with_a_hundred_thousand_metrics() {
    let fx = tempfile::tempdir().unwrap();
    let line = |step: u32| {
        let metrics: Vec<String> = (0..100_000).map(|i| format!("\"m{i}\": 1.0")).collect();
        format!("{{\"step\": {step}, {}}}\n", metrics.join(", "))
    };
    std::fs::write(fx.path().join("c.jsonl"), line(1) + &line(2)).unwrap();
    let out = meshparity(fx.path())
        .args(["compare", "c.jsonl", "c.jsonl"])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        &text[text.len().saturating_sub(500)..]
    );
    assert!(text.contains("0 of 100000 metrics fail"));
}

/// `--timeout KEY=SECS` whose KEY is no kind of job and matches no job is a usage error saying
/// what KEY may be (`forwrd=1` was accepted and applied to nothing).
#[test]
fn a_timeout_rule_that_matches_nothing_is_refused() {
    let fx = fixture(SPEC);
    for (rule, hint) in [
        ("forwrd=1", "did you mean `forward`?"),
        ("foo=1", "a glob over job names"),
    ] {
        let out = meshparity(fx.path())
            .args(["run", "spec.toml", "--no-progress", "--timeout", rule])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{rule}: {err}");
        assert!(
            err.contains("matches no job") && err.contains(hint),
            "{rule}: {err}"
        );
    }
}
