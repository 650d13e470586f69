//! `--partition` shards merged back: each shard runs (and records) the dependencies of its
//! jobs, but reports only the jobs it selected; `report --merge` gives exactly the unsharded
//! run's JUnit counts.

#[macro_use]
mod common;

use std::path::Path;

use assert_cmd::Command;

const SPEC: &str = concat!(
    r#"
[run]
name = "shards"
steps = 2
batch = 4
"#,
    tiny_model!(),
    r#"
[meshes.dp2]
dp = 2

[meshes.tp2]
tp = 2

[meshes.pp2]
pp = 2
microbatches = 2

[mutations]
select = ["all"]
"#
);

fn meshparity(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("meshparity").unwrap();
    // No-op jobs: what is counted here is the bookkeeping, not the numbers; one check fails so
    // that failures and skips are counted too.
    c.current_dir(dir)
        .env("MESHPARITY_TEST_FAULT", "*/tp2/curve=exit:1;*=noop");
    c
}

/// (testcases, failures, errors, skipped) of a JUnit file, and every case's name.
fn counts(path: &Path) -> (usize, usize, usize, usize, Vec<String>) {
    let xml = std::fs::read_to_string(path).unwrap();
    let mut names: Vec<String> = xml
        .split("<testcase ")
        .skip(1)
        .map(|c| {
            let attr = |a: &str| {
                c.split(&format!("{a}=\""))
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
                    .to_owned()
            };
            format!("{}::{}", attr("classname"), attr("name"))
        })
        .collect();
    names.sort();
    (
        names.len(),
        xml.matches("<failure").count(),
        xml.matches("<error").count(),
        xml.matches("<skipped").count(),
        names,
    )
}

#[test]
fn merged_shards_report_every_job_once() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("spec.toml"), SPEC).unwrap();
    meshparity(p)
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "all"])
        .assert()
        .code(3);
    let mut shard_cases = 0;
    for k in 1..=3 {
        let dir = format!("s{k}");
        let out = meshparity(p)
            .args(["run", "spec.toml", "--no-progress", "--run-dir", &dir])
            .args(["--partition", &format!("hash:{k}/3")])
            .output()
            .unwrap();
        assert!(matches!(out.status.code(), Some(0 | 3 | 1)), "{out:?}");
        shard_cases += counts(&p.join(&dir).join("junit.xml")).0;
    }
    let whole = counts(&p.join("all/junit.xml"));
    assert_eq!(shard_cases, whole.0, "shards report dependencies again");
    // A shard's dependencies are in its results and marked in its page, just not counted.
    let marked = (1..=3).any(|k| {
        let html = std::fs::read_to_string(p.join(format!("s{k}/report.html"))).unwrap();
        let results = std::fs::read_to_string(p.join(format!("s{k}/results.json"))).unwrap();
        let results: serde_json::Value = serde_json::from_str(&results).unwrap();
        let jobs = results["jobs"].as_array().unwrap();
        jobs.iter().any(|j| j["dependency"] == true)
            && html.contains("dependency: reported by the shard that selects it")
    });
    assert!(marked, "no shard marks its dependencies");
    meshparity(p)
        .args([
            "report",
            "--merge",
            "s1/results.json",
            "s2/results.json",
            "s3/results.json",
        ])
        .args(["--out", "merged"])
        .assert()
        // As the unsharded run: its failing check is an error (exit 3).
        .code(3);
    let merged = counts(&p.join("merged/junit.xml"));
    assert_eq!(merged, whole);
    assert!(
        whole.2 > 0 && whole.3 > 0,
        "a failure and skips were counted: {whole:?}"
    );
    // Without --merge several files are refused; shards of another spec too.
    meshparity(p)
        .args(["report", "s1/results.json", "s2/results.json"])
        .assert()
        .code(2);
    std::fs::write(p.join("other.toml"), SPEC.replace("steps = 2", "steps = 3")).unwrap();
    meshparity(p)
        .args(["run", "other.toml", "--no-progress", "--run-dir", "o"])
        .assert()
        .code(3);
    let out = meshparity(p)
        .args([
            "report",
            "--merge",
            "s1/results.json",
            "o/results.json",
            "--out",
            "x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("from one spec"));

    // A missing or doubled shard is not a run: refused, saying which.
    for (shards, want) in [
        (&["s1", "s2"][..], "shard(s) 3 of `hash:…/3` are missing"),
        (
            &["s1", "s2", "s1", "s3"][..],
            "s1) and results file 3 (run directory ",
        ),
    ] {
        let files: Vec<String> = shards.iter().map(|s| format!("{s}/results.json")).collect();
        let out = meshparity(p)
            .args(["report", "--merge"])
            .args(&files)
            .args(["--out", "y"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{shards:?}: {err}");
        assert!(err.contains(want), "{shards:?}: {err}");
    }
}

/// Two runs that both judged a job, differently: the merge keeps the worse verdict and says
/// so, in whichever order the files are given.
#[test]
fn shards_that_disagree_keep_the_worse_verdict_in_any_order() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("spec.toml"), SPEC).unwrap();
    for (dir, fault) in [("good", "*=noop"), ("bad", "*/dp2/forward=exit:1;*=noop")] {
        Command::cargo_bin("meshparity")
            .unwrap()
            .current_dir(p)
            .env("MESHPARITY_TEST_FAULT", fault)
            .args(["run", "spec.toml", "--no-progress", "--run-dir", dir])
            .args(["-f", "mesh=dp2"])
            .output()
            .unwrap();
    }
    for order in [["good", "bad"], ["bad", "good"]] {
        let out = format!("m-{}", order[0]);
        meshparity(p)
            .args(["report", "--merge"])
            .args(order.map(|s| format!("{s}/results.json")))
            .args(["--out", &out])
            .assert()
            .code(3);
        let merged: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(p.join(&out).join("results.json")).unwrap(),
        )
        .unwrap();
        let job = merged["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == "tiny@f32/dp2/forward")
            .unwrap()
            .clone();
        assert_eq!(job["status"], "error", "{order:?}");
        let summary = job["summary"].as_str().unwrap();
        assert!(summary.contains("shards disagree"), "{order:?}: {summary}");
    }
}
