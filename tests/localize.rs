//! Localization as users meet it: every mutation job of a run names the site it was injected
//! at, and a failed check's summary, JUnit message and HTML name its first divergence.

#[macro_use]
mod common;

use assert_cmd::Command;
use serde_json::Value;

const MESHES: &str = r#"
[meshes.dp2]
dp = 2

[meshes.tp2-sp]
tp = 2
sp = true

[meshes.pp2]
pp = 2
microbatches = 2
"#;

fn run(spec: &str, code: i32) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    Command::cargo_bin("meshparity")
        .unwrap()
        .env("MESHPARITY_NO_SHRINK", "1")
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .assert()
        .code(code);
    let text = std::fs::read_to_string(dir.path().join("run/results.json")).unwrap();
    (dir, serde_json::from_str(&text).unwrap())
}

#[test]
fn every_mutation_job_is_localized_where_it_was_injected() {
    let spec = format!(
        "[run]\nname = \"loc\"\nseed = 11\nbatch = 4\n{}{MESHES}\n[[matrix]]\nlevels = \
         [\"roundtrip\", \"forward\", \"oracle\"]\n[mutations]\nselect = [\"all\"]\n",
        tiny_model!()
    );
    let (dir, r) = run(&spec, 0);
    let mut mutations = 0;
    for j in r["jobs"].as_array().unwrap() {
        if j["kind"] != "mutation" {
            continue;
        }
        mutations += 1;
        let d = &j["detail"];
        assert_eq!(d["localized_as_injected"], true, "{j}");
        let site = d["localization"]["first"]["site"].as_str().unwrap();
        assert!(j["summary"].as_str().unwrap().contains(site), "{j}");
    }
    assert!(mutations >= 25, "{mutations} mutation jobs");
    let html = std::fs::read_to_string(dir.path().join("run/report.html")).unwrap();
    assert!(html.contains(r#"<mark class="site">layers.0.mlp.in.bwd.out</mark>"#));
}

#[test]
fn a_failed_check_names_its_first_divergence_in_every_report() {
    // A forward limit no f32 run can meet: the check fails on round-off alone, and the
    // localization says so instead of inventing a site (traces stay under their own limit).
    let spec = format!(
        "[run]\nname = \"tight\"\nbatch = 4\n{}[meshes.tp2]\ntp = 2\n\
         [tolerances.default]\nextends = \"builtin\"\nforward.f32 = {{ relative_l2 = 1e-30 }}\n\
         [[matrix]]\nlevels = [\"forward\"]\n",
        tiny_model!()
    );
    let (dir, r) = run(&spec, 1);
    let job = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["status"] == "failed")
        .expect("the forward level fails");
    let summary = job["summary"].as_str().unwrap();
    assert!(
        summary
            .contains("no traced site diverged beyond localization's site limit (relative L2 1e-4")
            && summary.contains("the level's own limit is tighter"),
        "{summary}"
    );
    assert!(job["detail"]["localization"]["compared"].as_u64().unwrap() > 50);
    let junit = std::fs::read_to_string(dir.path().join("run/junit.xml")).unwrap();
    assert!(junit.contains("no traced site diverged"), "{junit}");
    let html = std::fs::read_to_string(dir.path().join("run/report.html")).unwrap();
    assert!(html.contains(r#"class="divergence""#));
}
