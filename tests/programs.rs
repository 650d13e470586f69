//! What a user's program can do to a run, on the real binary (issue 32): flood its output,
//! print one endless line, fork into sessions of its own, never exit, plant links in its output
//! directory, be given a run directory a shell would run, run from a damaged snapshot. Nothing
//! it does outlives its job or escapes what the run keeps.

#[macro_use]
mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::harness::{
    command_spec, disk_use, files, fixture, gone_within, meshparity, processes_with, results,
    CURVE_MAP,
};

/// A command engine's program that never ends is killed at its timeout; the directory its
/// worker was building the run's artifacts in goes with it.
#[test]
fn a_job_ended_at_its_timeout_leaves_no_partial_directory() {
    let fx = fixture(&command_spec(
        r#"["-c", "echo started >&2; exec sleep 600"]"#,
    ));
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args(["--timeout", "2", "--grace", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let r = results(&fx.path().join("run"));
    assert_eq!(r["jobs"][0]["status"], "timeout", "{r:#}");
    let left: Vec<String> = std::fs::read_dir(fx.path().join("run/artifacts"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!left.iter().any(|n| n.contains(".partial-")), "{left:?}");
}

/// `yes` for the whole timeout: the run directory keeps the log's first and last megabytes,
/// with the cut said, never the gigabytes the program printed.
#[test]
fn a_program_that_floods_its_output_leaves_a_bounded_log() {
    let fx = fixture(&command_spec(r#"["-c", "yes 'flood flood flood flood'"]"#));
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args(["--timeout", "4", "--grace", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let run = fx.path().join("run");
    let r = results(&run);
    assert_eq!(r["jobs"][0]["status"], "timeout", "{r:#}");
    let size = disk_use(&run);
    assert!(size < 40 << 20, "run directory {size} bytes");
    // The program's log came out of the half-built artifacts, its last words kept.
    let logs: Vec<PathBuf> = files(&run.join("jobs"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("program.log")
        })
        .collect();
    assert!(!logs.is_empty(), "{:?}", files(&run));
    let stderr = files(&run.join("jobs"))
        .into_iter()
        .find(|p| p.ends_with("stderr.log"))
        .unwrap();
    let text = std::fs::read_to_string(stderr).unwrap();
    assert!(text.len() < 1 << 20, "stderr.log {} bytes", text.len());
    assert!(text.contains("the program's output goes on in"), "{text}");
}

/// One 50 MB line without a newline, then a failure: the line is cut where it is kept, and
/// the job's error quotes a bounded tail.
#[test]
fn an_endless_line_is_cut_and_the_error_stays_small() {
    let fx = fixture(&command_spec(
        r#"["-c", "head -c 50000000 /dev/zero | tr '\\0' x; exit 1"]"#,
    ));
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let run = fx.path().join("run");
    let size = disk_use(&run);
    assert!(size < 2 << 20, "run directory {size} bytes");
    let r = results(&run);
    let job = &r["jobs"][0];
    assert_eq!(job["status"], "error", "{job:#}");
    let record = serde_json::to_string(job).unwrap();
    assert!(record.len() < 64 * 1024, "record {} bytes", record.len());
    assert!(
        record.contains("bytes cut from lines longer than"),
        "{record}"
    );
}

/// A curve the program links to a file it never wrote is refused, not judged; a link it plants
/// under the name meshparity writes (`curve.jsonl`) is replaced, never written through.
#[test]
fn links_in_the_programs_output_are_neither_read_nor_written_through() {
    let fx = tempfile::tempdir().unwrap();
    let outside = fx.path().join("outside.jsonl");
    std::fs::write(&outside, "{\"step\": 1, \"loss\": 1.0}\n").unwrap();
    let plant = |link_as: &str| {
        format!(
            r#"["-c", "ln -s {} {link_as}; printf '{{\"step\": 1, \"loss\": 2.0}}\\n{{\"step\": 2, \"loss\": 1.0}}\\n' > own.jsonl"]"#,
            outside.display()
        )
    };
    // The program's curve is a link.
    let spec = command_spec(&plant("m.jsonl")).replace(
        CURVE_MAP,
        "cwd = \"{{out_dir}}\"\nartifacts = { curve = \"m.jsonl\" }",
    );
    std::fs::write(fx.path().join("spec.toml"), spec).unwrap();
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "linked"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let r = results(&fx.path().join("linked"));
    let record = serde_json::to_string(&r["jobs"][0]).unwrap();
    assert!(record.contains("is a symbolic link"), "{record}");

    // A link under the contract's own name: replaced, the file outside untouched.
    let spec = command_spec(&plant("curve.jsonl")).replace(
        CURVE_MAP,
        "cwd = \"{{out_dir}}\"\nartifacts = { curve = \"own.jsonl\" }",
    );
    std::fs::write(fx.path().join("spec.toml"), spec).unwrap();
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "planted"])
        .output()
        .unwrap();
    let r = results(&fx.path().join("planted"));
    assert_eq!(r["jobs"][0]["status"], "passed", "{:#}", r["jobs"][0]);
    assert_eq!(out.status.code(), Some(0));
    let kept = std::fs::read_to_string(&outside).unwrap();
    assert_eq!(kept, "{\"step\": 1, \"loss\": 1.0}\n");
}

/// A run directory whose name a shell would run reaches `shell = true` templates quoted, and a
/// template cannot undo the quoting with quotes of its own (refused by validate).
#[test]
fn a_run_directory_name_never_reaches_a_shell() {
    let body = |out: &str| {
        format!(
            r#"
[run]
name = "cmd"
steps = 1

[engines.prog]
kind = "command"
program = "echo"
shell = true
args = [{out}, "; echo '{{\"step\": 1, \"loss\": 1}}' > m.jsonl"]
cwd = "{{{{out_dir}}}}"
artifacts = {{ curve = "m.jsonl" }}

[models.m]
engine = "prog"

[meshes.dp2]
dp = 2

[[matrix]]
models = ["m"]
levels = ["curve"]
"#
        )
    };
    let fx = fixture(&body("\"{{out_dir}}\""));
    let out = meshparity(fx.path())
        .args([
            "run",
            "spec.toml",
            "--no-progress",
            "--run-dir",
            "r$(touch pwned)",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pwned: Vec<PathBuf> = files(fx.path())
        .into_iter()
        .filter(|p| p.file_name().unwrap() == "pwned")
        .collect();
    assert!(pwned.is_empty(), "{pwned:?}");

    let fx = fixture(&body("\"'{{out_dir}}'\""));
    let out = meshparity(fx.path())
        .args(["validate", "spec.toml"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("spec.toml:10:11") && err.contains("inside '…' quotes"),
        "{err}"
    );
}

/// A program that starts a child in a session of its own and one in the background that keeps
/// its output open, then writes its curve and exits: judged when it exits (not at the
/// timeout), and nothing it started outlives the job.
#[test]
fn a_program_is_judged_when_it_exits_and_leaves_nothing_running() {
    let fx = fixture(&command_spec(
        r#"["-c", "setsid sleep 617.1 & sleep 617.2 & printf '{\"step\": 1, \"loss\": 2}\\n{\"step\": 2, \"loss\": 1}\\n' > m.jsonl"]"#,
    )
    .replace(
        CURVE_MAP,
        "cwd = \"{{out_dir}}\"\nartifacts = { curve = \"m.jsonl\" }",
    ));
    // Waiting on the background child's output would end at the timeout, as a timeout.
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args(["--timeout", "30"])
        .output()
        .unwrap();
    let r = results(&fx.path().join("run"));
    assert_eq!(out.status.code(), Some(0), "{r:#}");
    assert!(r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["status"] == "passed"));
    assert_eq!(gone_within("617.", 5), Vec::<String>::new());
}

/// A program ended at its timeout: what it moved to a session of its own goes too.
#[test]
fn a_timed_out_program_leaves_nothing_running() {
    let fx = fixture(&command_spec(
        r#"["-c", "setsid sleep 618.1 & exec sleep 618.2"]"#,
    ));
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args(["--timeout", "2", "--grace", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(gone_within("618.", 5), Vec::<String>::new());
}

/// `kill -9` of the runner while a command job runs: within 5 s no process of the job is left,
/// the program, its background child and its own-session child included.
#[test]
fn a_killed_runner_leaves_no_process_of_its_jobs() {
    let fx = fixture(&command_spec(
        r#"["-c", "setsid sleep 619.1 & sleep 619.2 & exec sleep 619.3"]"#,
    ));
    let mut runner = std::process::Command::new(env!("CARGO_BIN_EXE_meshparity"))
        .current_dir(fx.path())
        .env_remove("MESHPARITY_TEST_FAULT")
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while processes_with("619.").len() < 3 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the program never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    runner.kill().unwrap();
    runner.wait().unwrap();
    assert_eq!(gone_within("619.", 5), Vec::<String>::new());
}

/// A variant's snapshot of a commit is sealed: one edited in the cache runs as the commit
/// again (remade), and one emptied is remade, instead of running what is there.
#[test]
fn a_damaged_variant_snapshot_is_remade() {
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    // The program's loss comes from a file of the commit.
    std::fs::write(r.join("loss.txt"), "1.5\n").unwrap();
    let spec = r#"[run]
name = "variants"
steps = 2
output = "out"

[engines.prog]
kind = "command"
program = "sh"
args = ["-c", "for s in 1 2; do echo \"{\\\"step\\\": $s, \\\"loss\\\": $(cat loss.txt)$s}\"; done > \"$0/m.jsonl\"", "{{out_dir}}"]
artifacts = { curve = "m.jsonl" }

[models.m]
engine = "prog"

[meshes.dp2]
dp = 2

[variants.base]
git = "HEAD"
repeats = 2

[variants.feature]

[[matrix]]
models = ["m"]
levels = ["curve"]
"#;
    std::fs::write(r.join("spec.toml"), spec).unwrap();
    common::commit_all(r);
    let run = |dir: &str| {
        let out = meshparity(r)
            .args(["run", "spec.toml", "--no-progress", "--run-dir", dir])
            .output()
            .unwrap();
        (out.status.code(), results(&r.join(dir)))
    };
    let (code, first) = run("first");
    assert_eq!(code, Some(0), "{first:#}");
    let checkouts = r.join("out/cache/checkouts");
    let snapshot = std::fs::read_dir(&checkouts)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("a snapshot");
    // Edited: the commit's loss would differ from the working tree's.
    std::fs::write(snapshot.join("loss.txt"), "9.5\n").unwrap();
    let (code, edited) = run("edited");
    assert_eq!(
        code,
        Some(0),
        "the edited snapshot ran as the commit: {edited:#}"
    );
    assert_eq!(
        std::fs::read_to_string(snapshot.join("loss.txt")).unwrap(),
        "1.5\n"
    );
    // Emptied.
    std::fs::remove_file(snapshot.join("loss.txt")).unwrap();
    std::fs::remove_file(snapshot.join("spec.toml")).unwrap();
    let (code, emptied) = run("emptied");
    assert_eq!(code, Some(0), "{emptied:#}");
    assert!(snapshot.join("loss.txt").is_file());
}

/// A `git` variant whose ref does not resolve (or whose spec is in no repository) is a spec
/// error at the variant's line, from `validate` on: `run` failed every job of it with exit 3.
#[test]
fn a_git_variant_that_does_not_resolve_is_a_spec_error() {
    let spec = r#"[run]
name = "v"

[engines.prog]
kind = "command"
program = "true"
artifacts = { curve = "m.jsonl" }

[models.m]
engine = "prog"

[meshes.dp2]
dp = 2

[variants.base]
git = "no-such-branch"

[variants.feature]

[[matrix]]
models = ["m"]
levels = ["curve"]
"#;
    let fx = fixture(spec); // a temporary directory: no repository at all
    for cmd in ["validate", "run"] {
        let out = meshparity(fx.path())
            .args([cmd, "spec.toml"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains("spec.toml:16:7") && err.contains("git ref `no-such-branch`"),
            "{err}"
        );
    }
}
