//! `run --shrink`: every caught mutation's report carries the smallest configuration still
//! caught at the same level and first diverging at the same site, and the command it gives
//! reproduces that when pasted into a shell.

mod common;

use std::process::Command;

use serde_json::Value;

#[test]
fn every_caught_mutation_carries_a_repro_that_reproduces_when_pasted() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let (code, _) = common::run_in_repo(
        &[
            "examples/quickstart.toml",
            "--shrink",
            "-f",
            "mesh=dp2,dp2-tp2-pp2",
        ],
        &run,
    );
    assert_eq!(code, Some(0));
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    let mutations: Vec<&Value> = results["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["name"].as_str().unwrap().contains("/mutation["))
        .collect();
    assert!(mutations.len() > 20, "{} mutation jobs", mutations.len());
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_meshparity"))
        .parent()
        .unwrap()
        .to_owned();
    for (i, job) in mutations.iter().enumerate() {
        let name = job["name"].as_str().unwrap();
        let repro = &job["detail"]["repro"];
        let command = repro["command"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no repro"));
        let level = repro["level"].as_str().unwrap();
        assert!(
            job["summary"]
                .as_str()
                .unwrap()
                .contains("smallest failing: "),
            "{name}"
        );
        // Smaller than the quickstart's model: one layer fewer at least, or a narrower one.
        let spec = std::fs::read_to_string(repro["spec"].as_str().unwrap()).unwrap();
        assert!(!spec.contains("hidden = 64"), "{name}: not shrunk:\n{spec}");
        // Pasted into a shell from another directory, with meshparity on the PATH.
        let elsewhere = dir.path().join(format!("paste{i}"));
        std::fs::create_dir_all(&elsewhere).unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{command} --no-progress --run-dir out"))
            .current_dir(&elsewhere)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name}: {command}\n{stdout}");
        let text = std::fs::read_to_string(elsewhere.join("out/results.json")).unwrap();
        let again: Value = serde_json::from_str(&text).unwrap();
        let caught = again["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"].as_str().unwrap().contains("/mutation["))
            .unwrap_or_else(|| panic!("{name}: the repro plans no mutation job"));
        let summary = caught["summary"].as_str().unwrap();
        assert!(
            summary.starts_with(&format!("caught by {level}")),
            "{name}: the repro's job says `{summary}`, the job was caught by {level}"
        );
    }
}

/// A failed check of a correct mesh (here a gate tighter than f32 round-off, the case of a
/// table tuned too far) is shrunk too: its repro carries the spec's own limits for the level,
/// so pasted it fails the same level.
#[test]
fn a_failed_check_carries_a_repro_with_its_own_limits() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        "[run]\nname = \"tight\"\nsteps = 2\nbatch = 4\n[models.m]\nlayers = 2\nhidden = 32\n\
         heads = 4\nffn = 64\nvocab = 64\nseq_len = 8\n[meshes.tp2]\ntp = 2\n\
         [tolerances.strict]\nextends = \"builtin\"\nforward.f32 = { relative_l2 = 1e-9 }\n\
         [[matrix]]\nlevels = [\"forward\"]\ntolerance = \"strict\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_meshparity"))
        .current_dir(dir.path())
        .args([
            "run",
            "spec.toml",
            "--shrink",
            "--no-progress",
            "--run-dir",
            "run",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let results: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("run/results.json")).unwrap(),
    )
    .unwrap();
    let failed = results["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["status"] == "failed")
        .expect("the forward check failed");
    let repro = &failed["detail"]["repro"];
    let spec = std::fs::read_to_string(repro["spec"].as_str().unwrap()).unwrap();
    assert!(
        spec.contains("forward.f32 = { relative_l2 = 1e-9 }") && spec.contains("layers = 1"),
        "{spec}"
    );
    let again = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} --no-progress --run-dir again",
            repro["command"].as_str().unwrap()
        ))
        .current_dir(dir.path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                std::path::Path::new(env!("CARGO_BIN_EXE_meshparity"))
                    .parent()
                    .unwrap()
                    .display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
}
