//! The `meshparity` binary as a user runs it: output, exit codes, files it relies on.

use assert_cmd::Command;

fn meshparity() -> Command {
    let mut c = Command::cargo_bin("meshparity").unwrap();
    c.env("NO_COLOR", "1");
    c
}

fn stdout(c: &mut Command) -> String {
    String::from_utf8(c.output().unwrap().stdout).unwrap()
}

#[test]
fn validate_accepts_the_examples() {
    let out = meshparity()
        .args([
            "validate",
            "examples/quickstart.toml",
            "examples/full-sweep.toml",
        ])
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("examples/quickstart.toml: ok (1 models, 5 meshes, 5 cells, 41 jobs)"),
        "{out}"
    );
    assert!(out.contains("examples/full-sweep.toml: ok"), "{out}");
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
fn plan_formats() {
    let text = stdout(meshparity().args(["plan", "examples/quickstart.toml"]));
    assert!(
        text.starts_with("plan `quickstart` from examples/quickstart.toml: 41 of 41 jobs selected"),
        "{text}"
    );
    let json = stdout(meshparity().args(["plan", "examples/quickstart.toml", "--format", "json"]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["format_version"], 1);
    assert_eq!(v["jobs"].as_array().unwrap().len(), 41);
    let dot = stdout(meshparity().args(["plan", "examples/quickstart.toml", "--format", "dot"]));
    assert!(dot.starts_with("digraph \"quickstart\" {"));
    assert_eq!(
        dot.matches(" -> ").count(),
        40,
        "every job but the reference has one edge"
    );
}

#[test]
fn plan_filters_and_partitions() {
    let out = stdout(meshparity().args([
        "plan",
        "examples/quickstart.toml",
        "--filter",
        "mesh=dp2",
        "--filter",
        "level=oracle",
    ]));
    assert!(
        out.contains("1 of 41 jobs selected, 4 more as dependencies"),
        "{out}"
    );
    let mut total = 0;
    for shard in 1..=3 {
        let json = stdout(meshparity().args([
            "plan",
            "examples/quickstart.toml",
            "--format",
            "json",
            "--partition",
            &format!("hash:{shard}/3"),
        ]));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        total += v["selected"].as_u64().unwrap();
    }
    assert_eq!(total, 41);
}

#[test]
fn plan_exit_codes() {
    meshparity()
        .args([
            "plan",
            "examples/quickstart.toml",
            "--filter",
            "model=nothing-like-this",
        ])
        .assert()
        .code(4)
        .stderr(predicates::str::contains("nothing selected"));
    meshparity()
        .args([
            "plan",
            "examples/quickstart.toml",
            "--partition",
            "hash:0/3",
        ])
        .assert()
        .code(2);
    meshparity()
        .args([
            "plan",
            "examples/quickstart.toml",
            "--filter",
            "colour=blue",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("unknown filter key `colour`"));
    meshparity()
        .args(["plan", "specs/tests/broken/misfit.toml"])
        .assert()
        .code(2);
}

#[test]
fn help_documents_exit_codes() {
    let help = stdout(meshparity().args(["plan", "--help"]));
    assert!(help.contains("4  nothing selected"), "{help}");
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
