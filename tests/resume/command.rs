//! A user's program resuming through the command engine (the JAX example).

use crate::common;
use crate::common::harness::meshparity;

/// A user's own program resumes through the command engine (the JAX example, issue 38 item 3):
/// saved under tensor parallelism and resumed under data parallelism, it matches the
/// uninterrupted run; each resumption bug the program declares is caught, named at the first
/// state entry or step that differs — the data position, which the program keeps outside its
/// merged state, by the rows each device trained on (`artifacts.inputs`): after the resumption
/// they are the reference's of step 1, and localization says so before any trace. The example's other pair (saved on one device, resumed
/// under tp2) runs the same program and code path: 52 s of CI's budget, left to
/// `meshparity run examples/command/jax-resume.toml`.
#[test]
fn a_jax_program_resumes_on_another_layout() {
    if !common::harness::jax() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let (code, results) = common::run_in_repo(
        &[
            "examples/command/jax-resume.toml",
            "-f",
            "mesh=tp2-to-dp2-at2",
        ],
        &out.path().join("run"),
    );
    assert_eq!(code, Some(0), "{results:#}");
    let jobs = results["jobs"].as_array().unwrap();
    let (mut caught, mut states) = (0, 0);
    for j in jobs {
        assert_eq!(j["status"], "passed", "{j:#}");
        let (name, summary) = (j["name"].as_str().unwrap(), j["summary"].as_str().unwrap());
        if name.ends_with("/roundtrip") {
            assert!(summary.contains("resumed state match"), "{name}: {summary}");
        }
        // The merged state the `from` mesh saved and the resumed run's after `oracle_steps`,
        // against the reference's at those steps.
        // Every correct level that trains past the checkpoint held the devices' rows to the
        // reference's at every step.
        if name.ends_with("/curve") || name.ends_with("/oracle") {
            let rows = comparisons(j).into_iter().find(|c| c["what"] == "inputs");
            let rows = rows.unwrap_or_else(|| panic!("{name}: no inputs judged: {j:#}"));
            assert!(
                rows["passed"] == true && rows["compared"].as_u64() >= Some(40),
                "{rows:#}"
            );
        }
        if name.ends_with("/oracle") {
            let judged = judged_states(j);
            let after = judged
                .iter()
                .filter(|(w, _)| w.starts_with("state after step 4"));
            assert_eq!((judged.len(), after.count()), (4, 2), "{name}: {j:#}");
            assert!(
                judged.iter().all(|(_, passed)| *passed),
                "{name}: {judged:?}"
            );
            states += 1;
        }
        let says = [
            ("resume-moments-dropped", "resumed state differs: `exp_avg."),
            ("resume-step-reset", "resumed state differs: `step`"),
            (
                "resume-data-position-reset",
                "first divergence: the inputs, before any computation: rank 0 trained at step 3 \
                 (after resuming from step 2's checkpoint) on the rows the reference took at \
                 step 1",
            ),
        ];
        if let Some((_, says)) = says.iter().find(|(b, _)| name.contains(&format!("[{b}]"))) {
            assert!(summary.starts_with("caught by"), "{name}: {summary}");
            assert!(summary.contains(says), "{name}: {summary}");
            if name.contains("data-position") {
                assert_eq!(j["detail"]["localized_as_injected"], true, "{j:#}");
            }
            caught += 1;
        }
    }
    assert_eq!(caught, 3, "three bugs on the pair: {results:#}");
    assert_eq!(states, 1, "one oracle level on the pair: {results:#}");
    common::summaries_cite_files_that_exist(&out.path().join("run"), &results);
    // What the pair's files were made from is gone once they are (the program's sharded
    // checkpoint, the merged states it wrote, the saving run's files); its log stays.
    let mut pairs = 0;
    for run in std::fs::read_dir(out.path().join("run/artifacts")).unwrap() {
        let run = run.unwrap().path();
        if !run.join("resume-saved.safetensors").exists() {
            continue;
        }
        pairs += 1;
        for gone in ["resume-checkpoint", "loaded"] {
            assert!(
                !run.join(gone).exists(),
                "{} kept",
                run.join(gone).display()
            );
        }
        let kept: Vec<_> = std::fs::read_dir(run.join("saving"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(kept, ["program.log"], "{}", run.display());
    }
    assert!(pairs >= 1, "no pair's run in the run directory");
}

/// The whole-state comparisons of a job's level (`state at the checkpoint (step 2)`, `state
/// after step 4`; a judge's detail is one level, a mutation run's lists them): (what, passed).
fn judged_states(job: &serde_json::Value) -> Vec<(String, bool)> {
    comparisons(job)
        .into_iter()
        .filter(|c| c["what"].as_str().unwrap().starts_with("state "))
        .map(|c| (c["what"].as_str().unwrap().to_owned(), c["passed"] == true))
        .collect()
}

/// Every comparison of a job's levels.
fn comparisons(job: &serde_json::Value) -> Vec<&serde_json::Value> {
    let detail = &job["detail"];
    let levels = match detail["levels"].as_array() {
        Some(levels) => levels.iter().collect(),
        None => vec![detail],
    };
    levels
        .into_iter()
        .flat_map(|o| o["comparisons"].as_array().unwrap())
        .collect()
}

/// A program whose merged state is wrong on more than one device (a gather that adds up its
/// devices' first moments) saves and loads it wrong alike, so the round trip holds: only the
/// states against the uninterrupted run's at the same steps (the reference's, on one device)
/// see it, at the oracle level: the saved one and the resumed run's after `oracle_steps`.
#[test]
fn a_merged_state_wrong_alike_on_save_and_load_is_caught_against_the_reference() {
    if !common::harness::jax() {
        return;
    }
    let dir = jax_example(&[
        "train.py",
        "sharded_checkpoint.py",
        "jax.toml",
        "jax-resume.toml",
    ]);
    let path = dir.path().join("train.py");
    let program = std::fs::read_to_string(&path).unwrap();
    let step = "    state[\"step\"] = np.asarray([opt_step], dtype=np.int64)\n";
    let wrong = format!(
        "    import jax\n    if len(jax.devices()) > 1:\n        \
         state = {{n: v * 2 if n.startswith(\"exp_avg.\") else v for n, v in state.items()}}\n{step}"
    );
    assert!(program.contains(step));
    std::fs::write(&path, program.replace(step, &wrong)).unwrap();
    meshparity(dir.path())
        .args([
            "run",
            "jax-resume.toml",
            "--no-progress",
            "--run-dir",
            "run",
        ])
        .args(["-f", "mesh=tp2-to-dp2-at2 and not mutation=*"])
        .env("MESHPARITY_NO_SHRINK", "1")
        .assert()
        .code(1);
    let text = std::fs::read_to_string(dir.path().join("run/results.json")).unwrap();
    let results: serde_json::Value = serde_json::from_str(&text).unwrap();
    let job = |level: &str| {
        results["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"].as_str().unwrap().ends_with(level))
            .unwrap_or_else(|| panic!("no {level} job: {results:#}"))
    };
    assert_eq!(job("/roundtrip")["status"], "passed", "{results:#}");
    let failed: Vec<_> = judged_states(job("/oracle"))
        .into_iter()
        .filter(|(_, passed)| !passed)
        .map(|(what, _)| what)
        .collect();
    assert_eq!(
        failed,
        [
            "state at the checkpoint (step 2) (updates, moments)",
            "state after step 4 (updates, moments)"
        ],
        "{results:#}"
    );
}

/// The state after `oracle_steps` is asked only of a program whose templates name
/// `{{state_dir}}`. One that resumes but never names it passes what it did, with a note on the
/// oracle level that the state there was not judged; one that names it and writes nothing
/// there is a job error naming the file, the value and the command.
#[test]
fn a_final_state_is_judged_only_where_the_program_writes_it() {
    if !common::harness::jax() {
        return;
    }
    let line = "    \"--state-at\", \"{{state_at}}\", \"--state-dir\", \"{{state_dir}}\",\n";
    let writes = "                merged(a.state_dir, params, opt, opt_step)\n";
    let engine = jax_toml();
    let program = std::fs::read_to_string(example().join("train.py")).unwrap();
    assert!(engine.contains(line) && program.contains(writes));
    let cases = [
        (engine.replace(line, ""), program.clone(), Some(0)),
        (
            engine.clone(),
            program.replace(writes, "                pass\n"),
            Some(3),
        ),
    ];
    for (engine, program, code) in cases {
        let dir = jax_example(&["sharded_checkpoint.py", "jax-resume.toml"]);
        std::fs::write(dir.path().join("jax.toml"), engine).unwrap();
        std::fs::write(dir.path().join("train.py"), program).unwrap();
        let out = meshparity(dir.path())
            .args(["run", "jax-resume.toml", "--no-progress"])
            .args([
                "--run-dir",
                "run",
                "-f",
                "mesh=tp2-to-dp2-at2 and level=oracle",
            ])
            .env("MESHPARITY_NO_SHRINK", "1")
            .output()
            .unwrap();
        let text = std::fs::read_to_string(dir.path().join("run/results.json")).unwrap();
        assert_eq!(out.status.code(), code, "{text}");
        if code == Some(3) {
            let says = "wrote no `final.safetensors` (artifacts.weights) into {{state_dir}}";
            assert!(text.contains(says), "{text}");
            continue;
        }
        let results: serde_json::Value = serde_json::from_str(&text).unwrap();
        let oracle = results["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"].as_str().unwrap().ends_with("/oracle"))
            .unwrap();
        let judged: Vec<_> = judged_states(oracle).into_iter().map(|(w, _)| w).collect();
        assert!(
            judged
                .iter()
                .all(|w| w.starts_with("state at the checkpoint")),
            "{judged:?}"
        );
        let notes = comparisons(oracle)
            .iter()
            .flat_map(|c| c["notes"].as_array().cloned().unwrap_or_default())
            .map(|n| n.as_str().unwrap().to_owned())
            .collect::<Vec<_>>();
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("state after step 4: not judged")),
            "{notes:?}"
        );
    }
}

/// The JAX example's directory.
fn example() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/command")
}

/// The JAX example's engine, its hooks (`PYTHONPATH`, relative to the example's directory)
/// found from any directory.
fn jax_toml() -> String {
    let text = std::fs::read_to_string(example().join("jax.toml")).unwrap();
    let hooks = example().join("../../python");
    let relative = "PYTHONPATH = \"../../python\"";
    assert!(text.contains(relative));
    text.replace(
        relative,
        &format!("PYTHONPATH = {:?}", hooks.display().to_string()),
    )
}

/// A scratch directory holding `files` of the JAX example, to run or edit there.
fn jax_example(files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in files {
        std::fs::copy(example().join(f), dir.path().join(f)).unwrap();
    }
    if files.contains(&"jax.toml") {
        std::fs::write(dir.path().join("jax.toml"), jax_toml()).unwrap();
    }
    dir
}

/// A program that resumes but never writes the state it loaded: the pair's run is a job error
/// that names the file, the template value and the command, not a round trip that passes on
/// nothing.
#[test]
fn a_program_that_does_not_write_what_it_loaded_is_told_so() {
    if !common::harness::jax() {
        return;
    }
    let dir = jax_example(&["train.py", "sharded_checkpoint.py", "jax-resume.toml"]);
    let engine = jax_toml();
    let without = engine.replace(", \"--loaded-dir\", \"{{loaded_dir}}\"", "");
    assert_ne!(engine, without);
    std::fs::write(dir.path().join("jax.toml"), without).unwrap();
    let out = meshparity(dir.path())
        .args([
            "run",
            "jax-resume.toml",
            "--no-progress",
            "--run-dir",
            "run",
        ])
        .args(["-f", "mesh=world1-to-tp2-at2 and level=roundtrip"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let results = std::fs::read_to_string(dir.path().join("run/results.json")).unwrap();
    assert!(
        results.contains("wrote no `final.safetensors` (artifacts.weights) into {{loaded_dir}}"),
        "{results}"
    );
}

/// An engine's resumption bug is planned only on pairs, and one that needs AdamW only under it:
/// the JAX example trained with SGD plans no `resume-moments-dropped` (SGD has no moments to
/// drop), but still its step and data bugs.
#[test]
fn an_engines_resumption_bugs_are_planned_where_they_exist() {
    let dir = jax_example(&["jax.toml", "jax-resume.toml"]);
    let plan = |spec: &str| {
        let out = meshparity(dir.path())
            .args(["plan", spec])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let adamw = plan("jax-resume.toml");
    assert!(adamw.contains("tp2-to-dp2-at2/mutation[resume-moments-dropped]"));
    assert!(
        !adamw.contains("tp2/mutation[resume-"),
        "not on a plain mesh"
    );
    assert!(
        !adamw.contains("-at2/mutation[skip-"),
        "not a plain bug on a pair"
    );
    let text = std::fs::read_to_string(dir.path().join("jax-resume.toml")).unwrap();
    let sgd = text.replace("optimizer = \"adamw\"", "optimizer = \"sgd\"");
    std::fs::write(dir.path().join("sgd.toml"), sgd).unwrap();
    let sgd = plan("sgd.toml");
    assert!(!sgd.contains("resume-moments-dropped"), "{sgd}");
    assert!(sgd.contains("tp2-to-dp2-at2/mutation[resume-step-reset]"));
}

/// A spec's pairs need not include every model: a program that cannot save (its templates
/// never name `{{save_dir}}`), checked on plain meshes beside a built-in model's pair, has a
/// reference that asks it for no saved state, and its jobs pass.
#[test]
fn a_program_without_pairs_is_not_asked_to_save_in_a_spec_with_pairs() {
    if !common::harness::jax() {
        return;
    }
    let dir = jax_example(&["train.py", "sharded_checkpoint.py", "jax.toml"]);
    let engine = std::fs::read_to_string(dir.path().join("jax.toml")).unwrap();
    let saves = "    \"--save-at\", \"{{save_at}}\", \"--save-dir\", \"{{save_dir}}\",\n";
    assert!(engine.contains(saves));
    std::fs::write(dir.path().join("jax.toml"), engine.replace(saves, "")).unwrap();
    let spec = format!(
        "include = [\"jax.toml\"]\n[run]\nname = \"mixed\"\nseed = 3\nsteps = 4\n\
         oracle_steps = 3\nbatch = 8\noptimizer = \"sgd\"\n{}\
         [[resume]]\nfrom = [\"dp2\"]\nto = [\"tp2\"]\nat = 2\n\n\
         [[matrix]]\nmodels = [\"tiny\"]\nmeshes = [\"dp2\"]\nlevels = [\"oracle\"]\n\
         dtypes = [\"f32\"]\n\n\
         [[matrix]]\nmodels = [\"mlp\"]\nmeshes = [\"tp2\"]\nlevels = [\"oracle\"]\n\
         dtypes = [\"f32\"]\n\n[mutations]\nselect = []\n",
        tiny_model!()
    );
    std::fs::write(dir.path().join("mixed.toml"), spec).unwrap();
    let out = meshparity(dir.path())
        .args(["run", "mixed.toml", "--no-progress", "--run-dir", "run"])
        // The program's own bugs are another test's (tests/command.rs).
        .args(["-f", "not mutation=*"])
        .env("MESHPARITY_NO_SHRINK", "1")
        .output()
        .unwrap();
    let results = std::fs::read_to_string(dir.path().join("run/results.json")).unwrap();
    assert_eq!(out.status.code(), Some(0), "{results}");
    assert!(results.contains("dp2-to-tp2-at2/oracle"), "{results}");
    assert!(results.contains("mlp@f32/tp2/oracle"), "{results}");
}
