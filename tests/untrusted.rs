//! What a user's program, a user's terminal or the run's own bulk can do to a run, on the real
//! binary: a reader that goes away loses no result, a job ended half-way leaves no half-built
//! artifacts, and a run keeps on disk only what its reports cite (issue 32).

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

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

/// Nothing here may take long; a hang fails the test instead of blocking CI.
const PATIENCE: Duration = Duration::from_secs(180);

fn meshparity(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("meshparity").unwrap();
    c.current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("MESHPARITY_TEST_FAULT")
        .timeout(PATIENCE);
    c
}

fn fixture(spec: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    dir
}

/// Every file below `dir`, links not followed.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

fn results(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap()
}

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
    // Each mutation's failed comparisons still name files that are there.
    for job in r["jobs"].as_array().unwrap() {
        if !job["name"].as_str().unwrap().contains("/mutation[") {
            continue;
        }
        let mut cited = 0;
        for level in job["detail"]["levels"].as_array().unwrap() {
            for c in level["comparisons"].as_array().unwrap() {
                if c["passed"] == false && c["reproduce"].as_str().is_some_and(|s| !s.is_empty()) {
                    for side in ["reference", "candidate"] {
                        let path = Path::new(c[side].as_str().unwrap());
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

/// A command engine's program that never ends is killed at its timeout; the directory its
/// worker was building the run's artifacts in goes with it.
#[test]
fn a_job_ended_at_its_timeout_leaves_no_partial_directory() {
    let spec = r#"
[run]
name = "cmd"
seed = 3
steps = 2
batch = 2

[engines.prog]
kind = "command"
program = "sh"
args = ["-c", "echo started >&2; exec sleep 600"]

[models.m]
engine = "prog"

[meshes.dp2]
dp = 2

[[matrix]]
models = ["m"]
levels = ["curve"]
"#;
    let fx = fixture(spec);
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

/// A command engine with one program, on dp2, at the curve level.
fn command_spec(args: &str) -> String {
    format!(
        r#"
[run]
name = "cmd"
seed = 3
steps = 2
batch = 2

[engines.prog]
kind = "command"
program = "sh"
args = {args}

[models.m]
engine = "prog"

[meshes.dp2]
dp = 2

[[matrix]]
models = ["m"]
levels = ["curve"]
"#
    )
}

fn disk_use(dir: &Path) -> u64 {
    files(dir)
        .iter()
        .map(|p| std::fs::symlink_metadata(p).map_or(0, |m| m.len()))
        .sum()
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
            r#"["-c", "ln -s {} {link_as}; echo '{{\"step\": 1, \"loss\": 2.0}}' > own.jsonl"]"#,
            outside.display()
        )
    };
    // The program's curve is a link.
    let spec = command_spec(&plant("m.jsonl")).replace(
        "[models.m]",
        "cwd = \"{{out_dir}}\"\nartifacts = { curve = \"m.jsonl\" }\n\n[models.m]",
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
        "[models.m]",
        "cwd = \"{{out_dir}}\"\nartifacts = { curve = \"own.jsonl\" }\n\n[models.m]",
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
steps = 2

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

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .chars()
            .all(|c| c.is_ascii_digit())
        {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(marker) {
            out.push(cmd);
        }
    }
    out
}

/// Wait up to `secs` for no process with `marker` to be left.
fn gone_within(marker: &str, secs: u64) -> Vec<String> {
    let t = std::time::Instant::now();
    loop {
        let left = processes_with(marker);
        if left.is_empty() || t.elapsed() > Duration::from_secs(secs) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A program that starts a child in a session of its own and one in the background that keeps
/// its output open, then writes its curve and exits: judged when it exits (not at the
/// timeout), and nothing it started outlives the job.
#[test]
fn a_program_is_judged_when_it_exits_and_leaves_nothing_running() {
    let fx = fixture(&command_spec(
        r#"["-c", "setsid sleep 617.1 & sleep 617.2 & echo '{\"step\": 1, \"loss\": 1}' > m.jsonl"]"#,
    )
    .replace(
        "[models.m]",
        "cwd = \"{{out_dir}}\"\nartifacts = { curve = \"m.jsonl\" }\n\n[models.m]",
    ));
    let t = std::time::Instant::now();
    let out = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args(["--timeout", "60"])
        .output()
        .unwrap();
    let r = results(&fx.path().join("run"));
    assert_eq!(out.status.code(), Some(0), "{r:#}");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
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

/// `--resume` after the cache was cleared: the passed trainings whose artifacts are gone run
/// again, and the jobs that need them pass; a directory that is not a run is refused untouched.
#[test]
fn resume_recomputes_what_a_cleared_cache_lost() {
    let fx = fixture(SPEC);
    let first = meshparity(fx.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args(["--timeout", "forward=0.001"])
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
args = ["-c", "for s in 1 2; do echo \"{\\\"step\\\": $s, \\\"loss\\\": $(cat loss.txt)}\"; done > \"$0/m.jsonl\"", "{{out_dir}}"]
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
