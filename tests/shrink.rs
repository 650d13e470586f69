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
        // Smaller than the quickstart's model: one layer fewer at least, or a narrower one. Its
        // paths are relative to the run directory, where its lines are pasted.
        let spec = std::fs::read_to_string(run.join(repro["spec"].as_str().unwrap())).unwrap();
        assert!(!spec.contains("hidden = 64"), "{name}: not shrunk:\n{spec}");
        // Pasted into a shell in the run directory, with meshparity on the PATH.
        let elsewhere = dir.path().join(format!("paste{i}"));
        std::fs::create_dir_all(&elsewhere).unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{command} --no-progress --run-dir {}",
                elsewhere.join("out").display()
            ))
            .current_dir(&run)
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
    let run_dir = dir.path().join("run");
    let spec = std::fs::read_to_string(run_dir.join(repro["spec"].as_str().unwrap())).unwrap();
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
        .current_dir(&run_dir)
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

/// By default a run shrinks what went wrong, the first job of each kind within 20 s: of two
/// failed checks of one (model, mesh, level) — here in two dtypes, under a limit nothing
/// meets — one shrinks and the other names it. A caught mutation, the passing outcome of its
/// job, does not shrink (it cost 20–31 s a job); `--shrink` shrinks every one, and wins over
/// the environment's switch, which turns shrinking off. The searches make their tries in
/// memory (a directory of the runner's on a tmpfs, removed when it ends, with any a killed
/// runner left there) and none in the jobs' directories; a job's time is its check's, the
/// search's reported apart.
#[test]
fn by_default_only_failures_shrink_the_first_of_each_kind_and_the_rest_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let shm = std::path::Path::new(meshparity_files::SHM);
    let in_memory = meshparity_files::is_tmpfs_with(shm, 2 << 30);
    let memory = tempfile::tempdir_in(if in_memory { shm } else { dir.path() }).unwrap();
    let abandoned = memory.path().join("meshparity-tries-1-2");
    std::fs::create_dir(&abandoned).unwrap();
    drop(meshparity_files::Lock::acquire(&abandoned).unwrap());
    let model = "[run]\nname = \"first\"\nsteps = 2\nbatch = 4\n[models.m]\nlayers = 2\n\
                 hidden = 32\nheads = 4\nffn = 64\nvocab = 64\nseq_len = 8\n[meshes.tp2]\ntp = 2\n";
    std::fs::write(
        dir.path().join("failing.toml"),
        format!(
            "{model}[tolerances.never]\nextends = \"builtin\"\n\
             forward.f32 = {{ relative_l2 = 1e-30 }}\nforward.f64 = {{ relative_l2 = 1e-30 }}\n\
             [[matrix]]\nlevels = [\"forward\"]\ndtypes = [\"f32\", \"f64\"]\n\
             tolerance = \"never\"\n[mutations]\nselect = []\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("caught.toml"),
        format!(
            "{model}[meshes.dp2-tp2]\ndp = 2\ntp = 2\n[[matrix]]\nlevels = [\"forward\"]\n\
             [mutations]\nselect = [\"tp-average-instead-of-sum\"]\n"
        ),
    )
    .unwrap();
    let run = |spec: &str, args: &[&str], no_shrink: bool, code: i32| -> Vec<Value> {
        let mut c = Command::new(env!("CARGO_BIN_EXE_meshparity"));
        c.current_dir(dir.path())
            .env_remove("MESHPARITY_NO_SHRINK")
            .env("MESHPARITY_MEMORY_DIR", memory.path());
        if no_shrink {
            c.env("MESHPARITY_NO_SHRINK", "1");
        }
        let out = c
            .args(["run", spec, "--no-progress", "--run-dir"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let results: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(args[0]).join("results.json")).unwrap(),
        )
        .unwrap();
        let jobs = results["jobs"].as_array().unwrap();
        jobs.iter()
            .filter(|j| j["kind"] == "forward" || j["kind"] == "mutation")
            .cloned()
            .collect()
    };
    let jobs = run("failing.toml", &["failing"], false, 1);
    assert_eq!(jobs.len(), 2);
    let shrunk: Vec<&Value> = jobs
        .iter()
        .filter(|j| j["detail"]["repro"].is_object())
        .collect();
    assert_eq!(shrunk.len(), 1, "one repro: {jobs:#?}");
    let other = jobs
        .iter()
        .find(|j| !j["detail"]["repro"].is_object())
        .unwrap();
    let holder = shrunk[0]["name"].as_str().unwrap();
    assert_eq!(other["detail"]["repro_in"].as_str(), Some(holder));
    assert!(other["summary"]
        .as_str()
        .unwrap()
        .contains(&format!("repro: in job {holder}")));
    // The search's time is apart from the check's.
    assert!(
        shrunk[0]["shrink_seconds"].as_f64().unwrap() > 0.0,
        "{:#}",
        shrunk[0]
    );
    let left: Vec<_> = std::fs::read_dir(memory.path()).unwrap().collect();
    assert_eq!(left.is_empty(), in_memory, "left in memory: {left:?}");
    let on_disk = walk(&dir.path().join("failing")).into_iter();
    assert_eq!(on_disk.filter(|p| p.ends_with("shrink")).count(), 0);
    // Caught mutations: no repro, no pointer, no search time.
    let caught = run("caught.toml", &["caught"], false, 0);
    assert_eq!(caught.iter().filter(|j| j["kind"] == "mutation").count(), 2);
    for j in &caught {
        assert!(
            j["detail"]["repro"].is_null()
                && j["detail"]["repro_in"].is_null()
                && j["shrink_seconds"].is_null(),
            "{j:#?}"
        );
    }
    // Off: no repro and no pointer.
    for j in run("failing.toml", &["off"], true, 1) {
        assert!(
            j["detail"]["repro"].is_null() && j["detail"]["repro_in"].is_null(),
            "{j:#?}"
        );
    }
    // `--shrink` wins over the environment: every failure and caught mutation has its own.
    for (spec, code) in [("failing.toml", 1), ("caught.toml", 0)] {
        for j in run(spec, &[&format!("every-{code}"), "--shrink"], true, code)
            .iter()
            .filter(|j| j["kind"] == "mutation" || j["status"] == "failed")
        {
            assert!(j["detail"]["repro"].is_object(), "{j:#?}");
        }
    }
}

/// A command engine shrinks what its `[engines.NAME.shrink]` names, down to its floors: the JAX
/// example's caught bug shrinks to one layer and the floors' widths, and the repro — its engine
/// table copied with an absolute working directory and only that bug — is caught again when
/// its command is pasted from another directory.
#[test]
fn a_command_engines_failure_shrinks_to_its_floors_and_reproduces_when_pasted() {
    if !common::harness::jax() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let (code, results) = common::run_in_repo(
        &[
            "examples/command/jax-tp-dp.toml",
            "-f",
            "mesh=tp2",
            "-f",
            "mutation=skip-tp-psum",
            "--shrink=20",
        ],
        &run,
    );
    assert_eq!(code, Some(0), "{results:#}");
    let job = results["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["kind"] == "mutation")
        .expect("the mutation job");
    let repro = &job["detail"]["repro"];
    let smallest = repro["smallest"]
        .as_str()
        .unwrap_or_else(|| panic!("{job:#}"));
    // Shrunk, never past a floor (hidden 8, ffn 8, vocab 16, seq 4 in jax.toml).
    assert!(smallest.contains("1 layer,"), "{smallest}");
    // Only what the program is passed: jax.toml's templates name no `{{heads}}`.
    assert!(!smallest.contains("heads"), "{smallest}");
    let spec = std::fs::read_to_string(run.join(repro["spec"].as_str().unwrap())).unwrap();
    let table: toml::Table = spec.parse().unwrap();
    let model = &table["models"]["m"];
    for (key, floor) in [("hidden", 8), ("ffn", 8), ("vocab", 16), ("seq_len", 4)] {
        assert!(model[key].as_integer().unwrap() >= floor, "{key}: {spec}");
    }
    let engine = &table["engines"]["jax"];
    let cwd = engine["cwd"].as_str().unwrap();
    assert!(
        std::path::Path::new(cwd).join("train.py").is_file(),
        "{cwd}"
    );
    let bugs: Vec<&String> = engine["mutations"].as_table().unwrap().keys().collect();
    assert_eq!(bugs, ["skip-tp-psum"]);
    // Pasted into a shell in the run directory, with meshparity on the PATH: the bug is caught
    // again.
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_meshparity"))
        .parent()
        .unwrap()
        .to_owned();
    let command = repro["command"].as_str().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{command} --no-progress --run-dir {}",
            dir.path().join("again").display()
        ))
        .current_dir(&run)
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let again: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("again/results.json")).unwrap(),
    )
    .unwrap();
    let caught = again["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|j| j["kind"] == "mutation" && j["status"] == "passed");
    assert!(caught, "{again:#}");
}

/// Every path under `dir`, directories included.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}
