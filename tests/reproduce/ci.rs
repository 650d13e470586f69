//! In CI (issue 61): the README's recipes run as written, a run directory is the whole
//! evidence (a copy of it, with the cache gone, reproduces every failure by its pasted lines),
//! and GitHub's step summary and annotations, GitLab's JUnit text, say what failed.

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use serde_json::Value;

/// A failing check (a limit nothing meets, on tp2) beside an uncaught mutation (a limit
/// nothing exceeds, on dp2), one failure of each kind a report cites.
const FAILING: &str = concat!(
    "[run]\nname = \"ev\"\nsteps = 2\nbatch = 4\n",
    tiny_model!(),
    r#"
[meshes.tp2]
tp = 2

[meshes.dp2]
dp = 2

[tolerances.never]
extends = "builtin"
forward.f32 = { relative_l2 = 1e-30 }

[tolerances.always]
extends = "builtin"
forward.f32 = { relative_l2 = 1e30 }

[[matrix]]
meshes = ["tp2"]
levels = ["forward"]
tolerance = "never"

[[matrix]]
meshes = ["dp2"]
levels = ["forward"]
tolerance = "always"

[mutations]
select = ["dp-local-loss-normalization"]
"#
);

fn exe() -> PathBuf {
    assert_cmd::cargo::cargo_bin("meshparity")
}

/// PATH with this build's meshparity first.
fn path() -> String {
    format!(
        "{}:{}",
        exe().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn results(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap()
}

/// `line` in bash in `dir`, meshparity on PATH; its exit code and output.
fn paste(line: &str, dir: &Path) -> (Option<i32>, String) {
    let out = StdCommand::new("bash")
        .arg("-c")
        .arg(line)
        .env("PATH", path())
        .env("MESHPARITY_NO_SHRINK", "1")
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The run directory copied elsewhere, the cache and the original deleted: every failed job's
/// reproduce line reruns it to the same verdict there, every comparison it cites re-derives the
/// same verdict from files inside the copy, and the shrunk repro fails again. They named the
/// shared cache, outside the run directory a CI job uploads, and an uncaught mutation kept none
/// of its run.
#[test]
fn a_copied_run_directory_reproduces_every_failure_by_its_pasted_lines() {
    let fx = tempfile::tempdir().unwrap();
    std::fs::write(fx.path().join("spec.toml"), FAILING).unwrap();
    let (code, _) = paste(
        "meshparity run spec.toml --no-progress --run-dir run --shrink=10",
        fx.path(),
    );
    assert_eq!(code, Some(1));
    let copy = tempfile::tempdir().unwrap();
    let copied = copy.path().join("downloaded");
    assert!(StdCommand::new("cp")
        .arg("-a")
        .arg(fx.path().join("run"))
        .arg(&copied)
        .status()
        .unwrap()
        .success());
    drop(fx);
    let r = results(&copied);
    let bad: Vec<&Value> = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["status"] == "failed")
        .collect();
    let kinds: Vec<&str> = bad.iter().map(|j| j["kind"].as_str().unwrap()).collect();
    assert!(
        kinds.contains(&"forward") && kinds.contains(&"mutation"),
        "{r:#}"
    );
    for job in bad {
        let line = job["reproduce"].as_str().unwrap();
        let (code, out) = paste(&format!("{line} --no-progress --run-dir again"), &copied);
        assert_eq!(code, Some(1), "{line}: {out}");
        let again = results(&copied.join("again"));
        let same = again["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == job["name"])
            .unwrap();
        assert_eq!(same["status"], "failed", "{line}: {again:#}");
        std::fs::remove_dir_all(copied.join("again")).unwrap();
        let levels: Vec<&Value> = match job["kind"].as_str() {
            Some("mutation") => job["detail"]["levels"].as_array().unwrap().iter().collect(),
            _ => vec![&job["detail"]],
        };
        let mut compared = 0;
        for c in levels
            .iter()
            .flat_map(|l| l["comparisons"].as_array().unwrap())
        {
            let line = c["reproduce"].as_str().unwrap();
            if line.is_empty() {
                continue;
            }
            let want = if c["passed"] == true { 0 } else { 1 };
            let (code, out) = paste(line, &copied);
            assert_eq!(code, Some(want), "{line}: {out}");
            compared += 1;
        }
        assert!(compared > 0, "{job:#}");
        if let Some(repro) = job["detail"]["repro"]["command"].as_str() {
            let (code, out) = paste(&format!("{repro} --no-progress --run-dir repro"), &copied);
            assert_eq!(code, Some(1), "{repro}: {out}");
        }
    }
}

/// Under GitHub Actions: the Markdown summary appended to the step summary, its job links at
/// the workflow run's artifacts, and an `::error` annotation per failed job on its mesh's line
/// of the spec with the reproduce line. In JUnit a failure's message is one line and its text
/// the detail with the commands that reproduce it (GitLab shows the text).
#[test]
fn github_and_gitlab_see_failures_where_they_look() {
    let fx = tempfile::tempdir().unwrap();
    std::fs::write(fx.path().join("spec.toml"), FAILING).unwrap();
    let summary = fx.path().join("step-summary.md");
    std::fs::write(&summary, "earlier step\n").unwrap();
    let out = StdCommand::new(exe())
        .current_dir(fx.path())
        .env("MESHPARITY_NO_SHRINK", "1")
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("GITHUB_SERVER_URL", "https://github.com")
        .env("GITHUB_REPOSITORY", "org/project")
        .env("GITHUB_RUN_ID", "7")
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let errors: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("::error "))
        .collect();
    assert_eq!(errors.len(), 2, "{stdout}");
    let line_of = |table: &str| FAILING.lines().position(|l| l == table).unwrap() + 1;
    let tp2 = format!("::error file=spec.toml,line={},", line_of("[meshes.tp2]"));
    let dp2 = format!("::error file=spec.toml,line={},", line_of("[meshes.dp2]"));
    assert!(errors.iter().any(|e| e.starts_with(&tp2)), "{stdout}");
    assert!(errors.iter().any(|e| e.starts_with(&dp2)), "{stdout}");
    assert!(errors.iter().all(|e| e
        .contains("%0Areproduce (in the run directory): meshparity run spec/spec.toml --filter")));
    let page = std::fs::read_to_string(&summary).unwrap();
    assert!(
        page.starts_with("earlier step\n## meshparity: ev"),
        "{page}"
    );
    assert!(
        page.contains("(https://github.com/org/project/actions/runs/7#artifacts)"),
        "{page}"
    );
    // As junitparser (what CI reporters build on) reads it: each failure's message one line,
    // its text the detail with the reproduce commands.
    if crate::common::python_has("junitparser", "junitparser") {
        let check = r#"
import sys
from junitparser import JUnitXml, Failure
n = 0
for suite in JUnitXml.fromfile(sys.argv[1]):
    for case in suite:
        for r in case.result:
            if isinstance(r, Failure):
                assert "\n" not in r.message and r.message != r.text, (r.message, r.text)
                assert "reproduce (in the run directory):" in r.text, r.text
                n += 1
assert n == 2, n
print("ok")
"#;
        let out = StdCommand::new("python3")
            .args(["-c", check])
            .arg(fx.path().join("run/junit.xml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let junit = std::fs::read_to_string(fx.path().join("run/junit.xml")).unwrap();
    let failure = junit.split("<failure ").nth(1).expect("a failure element");
    let message = failure.split("message=\"").nth(1).unwrap();
    let message = &message[..message.find('"').unwrap()];
    let text = &failure[failure.find('>').unwrap() + 1..failure.find("</failure>").unwrap()];
    assert!(
        !message.contains("&#xA;") && !message.contains('\n'),
        "{message}"
    );
    assert_ne!(message, text.trim());
    assert!(
        text.contains("reproduce (in the run directory):")
            && text.contains("meshparity run spec/spec.toml"),
        "{text}"
    );
}

/// The README's GitHub Actions and GitLab CI files, parsed and carried out step by step as
/// written (tests/consumers/ci_recipes.py) on a real checkout of a spec whose four shards leave
/// one empty: every step passes, the empty shard is a shard, and the merged report holds
/// exactly the unsharded run's jobs, passed; only run directories are uploaded.
#[test]
fn the_readmes_ci_recipes_run_as_written() {
    if !crate::common::python_has("yaml", "pyyaml") {
        return;
    }
    let fx = tempfile::tempdir().unwrap();
    let spec = fx.path().join("parity.toml");
    std::fs::write(
        &spec,
        concat!(
            "[run]\nname = \"parity\"\nsteps = 2\nbatch = 4\n",
            tiny_model!(),
            "[meshes.tp2]\ntp = 2\n[[matrix]]\nlevels = [\"forward\"]\n[mutations]\nselect = []\n"
        ),
    )
    .unwrap();
    let work = fx.path().join("ci");
    std::fs::create_dir(&work).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = StdCommand::new("python3")
        .arg(root.join("tests/consumers/ci_recipes.py"))
        .arg(root.join("README.md"))
        .arg(&spec)
        .arg(&work)
        .env("PATH", path())
        .env("MESHPARITY_NO_SHRINK", "1")
        .env_remove("GITHUB_ACTIONS")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let ran: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (unsharded, _) = paste(
        "meshparity run parity.toml --no-progress --run-dir whole",
        fx.path(),
    );
    assert_eq!(unsharded, Some(0));
    let mut whole: Vec<String> = results(&fx.path().join("whole"))["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_owned())
        .collect();
    whole.sort();
    for (system, merged) in [("github", "report/merged"), ("gitlab", "report-1/merged")] {
        let jobs = ran[system].as_object().unwrap();
        for (name, runs) in jobs {
            for run in runs.as_array().unwrap() {
                assert_eq!(run["failed"], false, "{system} {name}: {run:#}\n{err}");
            }
        }
        let shards: Vec<usize> = jobs["parity"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, run)| {
                let ws = PathBuf::from(run["workspace"].as_str().unwrap());
                results(&ws.join(format!("out/shard-{}", i + 1)))["jobs"]
                    .as_array()
                    .unwrap()
                    .len()
            })
            .collect();
        assert!(
            shards.contains(&0),
            "{system}: no empty shard in {shards:?}"
        );
        let merged = work.join(system).join(merged);
        let mut names: Vec<String> = results(&merged)["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .inspect(|j| assert_eq!(j["status"], "passed", "{j:#}"))
            .map(|j| j["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        assert_eq!(names, whole, "{system}");
        assert!(merged.join("junit.xml").is_file() && merged.join("report.html").is_file());
    }
    let report = &ran["github"]["report"][0];
    assert!(
        report["summary"]
            .as_str()
            .unwrap()
            .contains("## meshparity: parity"),
        "{report:#}"
    );
    for run in ran["gitlab"]["parity"].as_array().unwrap() {
        assert_eq!(run["uploaded"], serde_json::json!(["out/"]));
        let ws = PathBuf::from(run["workspace"].as_str().unwrap());
        // The cache is not under what is uploaded: only the shard's run directory is.
        let entries: Vec<_> = std::fs::read_dir(ws.join("out"))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(entries.len(), 1, "{entries:?}");
    }
}
