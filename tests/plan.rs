//! What a user reads before and while jobs run: `meshparity plan` (formats, filters, exit
//! codes, the mesh topology it explains) and the lines `run` prints.

mod common;

use common::{cli as meshparity, stdout};

#[test]
fn plan_formats() {
    let text = stdout(meshparity().args(["plan", "examples/quickstart.toml"]));
    assert!(
        text.starts_with(
            "plan `quickstart` from examples/quickstart.toml: 110 of 110 jobs selected"
        ),
        "{text}"
    );
    let json = stdout(meshparity().args(["plan", "examples/quickstart.toml", "--format", "json"]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["format_version"], 1);
    assert_eq!(v["jobs"].as_array().unwrap().len(), 110);
    let dot = stdout(meshparity().args(["plan", "examples/quickstart.toml", "--format", "dot"]));
    assert!(dot.starts_with("digraph \"quickstart\" {"));
    assert_eq!(
        dot.matches(" -> ").count(),
        124,
        "one edge into each training and mutation job, two into each level (its mesh's \
         training and the level before)"
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
        out.contains("1 of 110 jobs selected, 5 more as dependencies"),
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
    assert_eq!(total, 110);
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

/// `--explain-mesh` prints every group of a mesh in global ranks, as text and as JSON, and a
/// mesh the spec does not define is a spec error that names the closest one.
#[test]
fn plan_explains_a_meshs_groups() {
    let text = stdout(meshparity().args([
        "plan",
        "examples/quickstart.toml",
        "--explain-mesh",
        "dp2-tp2-pp2",
    ]));
    assert!(
        text.starts_with("mesh `dp2-tp2-pp2` (examples/quickstart.toml:"),
        "{text}"
    );
    assert!(text.contains("     5  tp1 cp0 dp0 pp1"), "{text}");
    assert!(text.contains("[0 1 4 5] [2 3 6 7]"), "{text}");
    let json = stdout(meshparity().args([
        "plan",
        "examples/full-sweep.toml",
        "--explain-mesh",
        "ep2-etp2",
        "--format",
        "json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let groups = |axis: &str| {
        v["topology"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["axis"] == axis)
            .unwrap_or_else(|| panic!("no {axis} in {json}"))["groups"]
            .clone()
    };
    assert_eq!(groups("ep"), serde_json::json!([[0, 2], [1, 3]]));
    assert_eq!(groups("expert-mp"), serde_json::json!([[0, 1, 2, 3]]));
    let out = meshparity()
        .args([
            "plan",
            "examples/quickstart.toml",
            "--explain-mesh",
            "dp2-tp2-pp",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("no mesh `dp2-tp2-pp`; did you mean `dp2-tp2-pp2`?"),
        "{err}"
    );
}

/// `run` prints a passing job's gist (what caught a mutation, how many values matched) and
/// leaves the evidence to the reports, unless `--verbose`; `--color always` colours the status
/// word, and NO_COLOR or a pipe leaves it plain.
#[test]
fn run_lines_are_short_and_coloured_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| -> String {
        let out = meshparity()
            .args(["run", "examples/quickstart.toml", "--no-progress", "-f"])
            .arg("mesh=dp2 and (level=forward or mutation=dp-skip-grad-all-reduce)")
            .arg("--run-dir")
            .arg(dir.path().join(extra.len().to_string()))
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8(out.stderr).unwrap()
    };
    let plain = run(&[]);
    let caught = plain
        .lines()
        .find(|l| l.contains("mutation[dp-skip-grad-all-reduce]"))
        .unwrap();
    assert!(caught.ends_with("caught by oracle"), "{caught}");
    assert!(!plain.contains('\u{1b}'), "{plain}");
    assert!(!plain.contains("closest"), "{plain}");
    let verbose = run(&["--verbose", "--color", "always"]);
    assert!(verbose.contains("closest"), "{verbose}");
    assert!(verbose.contains("\u{1b}[32m  PASSED\u{1b}[0m"), "{verbose}");
}

/// The README's first paragraph states the quickstart's size: it is the plan's, so the
/// sentence (and `docs/screenshot.sh`'s picture beside it) cannot go stale silently.
#[test]
fn the_readme_states_the_quickstarts_plan() {
    let json = stdout(meshparity().args(["plan", "examples/quickstart.toml", "--format", "json"]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let jobs = v["jobs"].as_array().unwrap().len();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let at = readme
        .find("The quickstart (")
        .expect("the quickstart's paragraph");
    let said = &readme[at..at + readme[at..].find(" jobs").unwrap()];
    let number: String = said
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect::<String>()
        .chars()
        .rev()
        .collect();
    assert_eq!(
        number.parse::<usize>().ok(),
        Some(jobs),
        "the README says: {said}"
    );
}

/// The trace level comes with `oracle` where the tolerance table gates it — bf16 in the
/// built-in table, not f32 — and an exclude rule leaves it out.
#[test]
fn the_trace_level_comes_with_oracle_where_it_is_gated() {
    let dir = tempfile::tempdir().unwrap();
    let spec = std::fs::read_to_string("examples/quickstart.toml").unwrap();
    let spec = spec.replace(
        "levels = [\"roundtrip\", \"forward\", \"curve\", \"oracle\"]",
        "levels = [\"forward\", \"oracle\"]\ndtypes = [\"f32\", \"bf16\"]",
    );
    let jobs = |text: &str| -> Vec<String> {
        let path = dir.path().join("spec.toml");
        std::fs::write(&path, text).unwrap();
        let json = stdout(meshparity().args(["plan", path.to_str().unwrap(), "--format", "json"]));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let names = v["jobs"].as_array().unwrap().iter();
        names
            .map(|j| j["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let names = jobs(&spec);
    assert!(
        names.iter().any(|n| n == "tiny@bf16/tp2/trace"),
        "{names:?}"
    );
    assert!(!names
        .iter()
        .any(|n| n.contains("@f32/") && n.ends_with("/trace")));
    let excluded = spec.replace(
        "dtypes = [\"f32\", \"bf16\"]",
        "dtypes = [\"f32\", \"bf16\"]\nexclude = [{ level = \"trace\" }]",
    );
    assert!(!jobs(&excluded).iter().any(|n| n.ends_with("/trace")));
}

/// A command engine's model gets the trace level where its engine maps the directory its
/// program writes traces into: asked by name, and implied by `oracle` in bf16. Asked of an
/// engine that maps none, it is a spec error that points at the entry's levels and says what
/// to do; implied there, it is left out.
#[test]
fn the_trace_level_needs_a_command_engines_trace_directory() {
    let dir = tempfile::tempdir().unwrap();
    let engine = std::fs::read_to_string("examples/command/jax.toml").unwrap();
    std::fs::write(dir.path().join("jax.toml"), &engine).unwrap();
    let spec = std::fs::read_to_string("examples/command/jax-tp-dp.toml").unwrap();
    let path = dir.path().join("spec.toml");
    let plan = |text: &str| {
        std::fs::write(&path, text).unwrap();
        meshparity()
            .args(["plan", path.to_str().unwrap(), "--format", "json"])
            .output()
            .unwrap()
    };
    let traced = |out: &std::process::Output| {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let names: Vec<String> = v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["name"].as_str().unwrap().to_owned())
            .collect();
        assert!(names.iter().any(|n| n.ends_with("/oracle")), "{names:?}");
        names.iter().filter(|n| n.ends_with("/trace")).count()
    };
    // In bf16, where the built-in table has the trace level's limits.
    let bf16 = spec.replace(
        "optimizer = \"sgd\"",
        "optimizer = \"sgd\"\ndtype = \"bf16\"",
    );
    assert!(traced(&plan(&bf16)) > 0);
    let asked = bf16.replace(
        "levels = [\"roundtrip\", \"forward\", \"curve\", \"oracle\"]",
        "levels = [\"oracle\", \"trace\"]",
    );
    assert!(traced(&plan(&asked)) > 0);
    // The engine without its trace directory: implied, left out; asked, refused.
    let untraced = engine.replace("trace = \"trace\"", "");
    assert_ne!(untraced, engine);
    std::fs::write(dir.path().join("jax.toml"), untraced).unwrap();
    assert_eq!(traced(&plan(&bf16)), 0);
    let out = plan(&asked);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("level `trace` needs `trace` in [engines.jax.artifacts]"),
        "{err}"
    );
    assert!(err.contains("spec.toml:21:21:"), "{err}");
    assert!(err.contains("leave the level out"), "{err}");
}
