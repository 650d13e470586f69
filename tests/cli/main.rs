//! The `meshparity` binary as a user runs it: output, exit codes, files it relies on.

#[path = "../common/mod.rs"]
mod common;

mod compare;
mod devices;

use common::{cli as meshparity, stdout};

#[test]
fn validate_accepts_the_examples() {
    let out = meshparity()
        .args(["validate", "examples/quickstart.toml"])
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("examples/quickstart.toml: ok (1 models, 5 meshes, 5 cells, 110 jobs)"),
        "{out}"
    );
}

/// The release sweep's every cell is one the built-in engine computes (expert and context
/// parallelism included): it validates and plans, moe on the expert meshes among its jobs.
#[test]
fn the_release_sweep_validates_and_plans_every_cell() {
    meshparity()
        .args(["validate", "examples/full-sweep.toml"])
        .assert()
        .code(0);
    meshparity()
        .args([
            "plan",
            "examples/full-sweep.toml",
            "-f",
            "model=moe",
            "-f",
            "mesh=ep*",
        ])
        .assert()
        .code(0)
        .stdout(predicates::str::contains("ep2-etp2"));
}

#[test]
fn validate_reports_every_error_with_its_position_and_exits_2() {
    let out = meshparity()
        .args([
            "validate",
            "specs/tests/broken/unknown-name.toml",
            "examples/quickstart.toml",
        ])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    for pos in [
        "unknown-name.toml:7:19",
        "unknown-name.toml:8:11",
        "unknown-name.toml:9:13",
        "unknown-name.toml:12:11",
    ] {
        assert!(err.contains(pos), "missing {pos} in:\n{err}");
    }
    assert!(err.contains("4 error(s)"), "{err}");
    // The valid spec after the broken one is still checked.
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("examples/quickstart.toml: ok"));
}

#[test]
fn validate_of_a_missing_file_is_a_spec_error() {
    meshparity()
        .args(["validate", "nope.toml"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("cannot read spec `nope.toml`"));
}

#[test]
fn help_documents_exit_codes() {
    let help = stdout(meshparity().args(["plan", "--help"]));
    assert!(help.contains("4  nothing selected"), "{help}");
    for command in [
        "validate",
        "plan",
        "run",
        "calibrate",
        "report",
        "schema",
        "list",
    ] {
        let help = stdout(meshparity().args([command, "--help"]));
        assert!(help.contains("Exit codes:\n  0  "), "{command}: {help}");
    }
    let list = stdout(meshparity().args(["list", "--help"]));
    assert!(list.contains("`list mutations`"), "{list}");
}

/// `--version` names the commit the binary was built from: the one `git` reports for this
/// checkout (outside a git checkout, the version alone).
#[test]
fn the_version_names_its_commit() {
    let v = stdout(meshparity().arg("--version"));
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let version = concat!("meshparity ", env!("CARGO_PKG_VERSION"));
    match head {
        Some(commit) => assert!(v.starts_with(&format!("{version} ({commit}")), "{v}"),
        None => assert_eq!(v.trim(), version),
    }
}

#[test]
fn committed_schema_is_current_and_examples_point_at_it() {
    let printed = stdout(meshparity().arg("schema"));
    let committed = std::fs::read_to_string("schema/meshparity.schema.json").unwrap();
    assert_eq!(
        printed, committed,
        "run `cargo run -- schema > schema/meshparity.schema.json`"
    );
    for entry in std::fs::read_dir("examples").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.starts_with("#:schema ../schema/meshparity.schema.json"),
                "{}",
                path.display()
            );
        }
    }
}

#[test]
fn calibrate_refuses_seed_counts_it_cannot_hold() {
    for args in [
        vec!["--seeds", "0"],
        vec!["--seeds", "1000000000000"],
        vec!["--seeds", "5", "--first-seed", "18446744073709551614"],
    ] {
        let out = meshparity()
            .args(["calibrate", "examples/quickstart.toml", "--out"])
            .arg(tempfile::tempdir().unwrap().path())
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error: --"),
            "{args:?}"
        );
    }
}

/// Output that goes away and absurd durations end with a message and an exit code, never a
/// panic (exit 101).
#[test]
fn closed_pipes_full_disks_and_huge_durations_do_not_panic() {
    use std::io::Read;
    use std::process::{Command as Std, Stdio};
    let exe = assert_cmd::cargo::cargo_bin("meshparity");
    // A reader that leaves after 10 bytes: quiet success, as `| head` expects.
    let mut child = Std::new(&exe)
        .args(["plan", "examples/full-sweep.toml", "-f", "model=dense"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if std::path::Path::new("/dev/full").exists() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = Std::new(&exe)
            .args(["plan", "examples/quickstart.toml"])
            .stdout(full)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write the output"));
    }
    for args in [
        ["--timeout", "1e30"],
        ["--timeout", "reference=1e300"],
        ["--grace", "1e20"],
    ] {
        meshparity()
            .args(["run", "examples/quickstart.toml"])
            .args(args)
            .assert()
            .code(2)
            .stderr(predicates::str::contains("30 days"));
    }
}

/// A run name is a name, not a path (`../x` used to write a run directory outside the output
/// folder), names are bounded, and two names that sanitize alike (`m+1`, `m_1`) keep separate
/// job directories.
#[test]
fn names_cannot_escape_or_collide() {
    let dir = tempfile::tempdir().unwrap();
    for (name, why) in [
        ("../x", "invalid run name `../x`"),
        ("/tmp/x", "invalid run name `/tmp/x`"),
        (&"n".repeat(300), "run name is 300 bytes long"),
    ] {
        let spec = dir.path().join("spec.toml");
        std::fs::write(
            &spec,
            format!("[run]\nname = {name:?}\n[models.m]\n[meshes.dp2]\ndp = 2\n"),
        )
        .unwrap();
        meshparity()
            .arg("validate")
            .arg(&spec)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(why));
    }
    let spec = dir.path().join("twins.toml");
    std::fs::write(
        &spec,
        "[run]\nname = \"twins\"\nsteps = 1\nbatch = 2\noutput = \"out\"\n\
         [models.\"m+1\"]\nlayers = 1\nhidden = 16\nheads = 2\nffn = 16\nvocab = 16\nseq_len = 4\n\
         [models.m_1]\nlayers = 1\nhidden = 16\nheads = 2\nffn = 16\nvocab = 16\nseq_len = 4\n\
         [meshes.dp2]\ndp = 2\n[[matrix]]\nlevels = [\"forward\"]\n",
    )
    .unwrap();
    meshparity()
        .current_dir(dir.path())
        .args(["run", "twins.toml", "--no-progress", "--run-dir", "run"])
        .assert()
        .code(0);
    let jobs: Vec<String> = std::fs::read_dir(dir.path().join("run/jobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let forward = jobs.iter().filter(|j| j.contains("dp2_forward")).count();
    assert_eq!(forward, 2, "{jobs:?}");
}

/// docs/mutations.md holds the registry's table, as `list mutations --markdown` prints it.
#[test]
fn the_mutation_docs_table_is_the_registry() {
    let table = stdout(meshparity().args(["list", "mutations", "--markdown"]));
    let doc = std::fs::read_to_string("docs/mutations.md").unwrap();
    let start = doc.find("<!-- catalog:start -->\n").unwrap() + "<!-- catalog:start -->\n".len();
    let end = doc.find("<!-- catalog:end -->").unwrap();
    assert_eq!(
        &doc[start..end],
        table,
        "run `cargo run -- list mutations --markdown` and paste it into docs/mutations.md"
    );
    for m in meshparity_specs::catalog::CATALOG {
        assert!(table.contains(&format!("`{}`", m.name)), "{}", m.name);
    }
}
