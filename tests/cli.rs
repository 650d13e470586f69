//! The `meshparity` binary as a user runs it: output, exit codes, files it relies on.

mod common;

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

/// Two small checkpoints via Python-free bytes: our own writer is exercised in the compare
/// crate's tests; here the binary's exit codes and formats matter.
fn checkpoint(dir: &std::path::Path, name: &str, values: &[f32]) -> std::path::PathBuf {
    let mut header = format!(
        r#"{{"w":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{}]}}}}"#,
        values.len(),
        values.len() * 4
    );
    while (8 + header.len()) % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn compare_exit_codes_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let a = checkpoint(dir.path(), "a.safetensors", &[1.0, 2.0, 3.0]);
    let same = checkpoint(dir.path(), "same.safetensors", &[1.0, 2.0, 3.0]);
    let off = checkpoint(dir.path(), "off.safetensors", &[1.0, 2.5, 3.0]);
    let out = stdout(meshparity().arg("compare").arg(&a).arg(&same));
    assert!(
        out.contains(
            "MATCH: 0 of 1 tensors fail, 0 structural problem(s) (compared 1 tensors, 3 elements)"
        ),
        "{out}"
    );
    meshparity()
        .arg("compare")
        .arg(&a)
        .arg(&same)
        .assert()
        .code(0);
    let out = meshparity()
        .arg("compare")
        .arg(&a)
        .arg(&off)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8(out)
        .unwrap()
        .contains("FAIL allclose: 1 element(s)"));
    let json = stdout(meshparity().arg("compare").arg(&a).arg(&off).arg("--json"));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["verdict"], "mismatch");
    assert_eq!(
        v["tensors"][0]["metrics"]["max_abs_index"],
        serde_json::json!([1])
    );
    // Loosen the limits and it passes.
    meshparity()
        .arg("compare")
        .arg(&a)
        .arg(&off)
        .args(["-t", "rtol=0.5"])
        .assert()
        .code(0);
    meshparity()
        .arg("compare")
        .arg(&a)
        .arg(&off)
        .args(["--profile", "exact"])
        .assert()
        .code(1);
    // Bad input: exit 2 with the file named.
    std::fs::write(
        dir.path().join("bad.safetensors"),
        b"\x05\0\0\0\0\0\0\0{oops",
    )
    .unwrap();
    meshparity()
        .arg("compare")
        .arg(&a)
        .arg(dir.path().join("bad.safetensors"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "bad.safetensors` is not a valid safetensors file: bad header JSON",
        ));
    meshparity()
        .arg("compare")
        .arg(&a)
        .arg(&off)
        .args(["--profile", "sideways"])
        .assert()
        .code(2);
}

#[test]
fn compare_curves_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, losses: &[f64]| {
        let text: String = losses
            .iter()
            .enumerate()
            .map(|(i, l)| format!("{{\"step\":{},\"loss\":{l}}}\n", i + 1))
            .collect();
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let a = write("a.jsonl", &[3.0, 2.0, 1.0]);
    let b = write("b.jsonl", &[3.0, 2.0, 1.0 + 1e-2]);
    meshparity().arg("compare").arg(&a).arg(&a).assert().code(0);
    let out = meshparity()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("FAIL at step(s) [3]"), "{text}");
    // The limits in force, and the worst step in units of the limit.
    assert!(text.contains("gates:     |b − f| / |b| ≤ "), "{text}");
    assert!(text.contains("×  FAIL"), "{text}");
    meshparity()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["-t", "rel=2e-2"])
        .assert()
        .code(0);
    meshparity()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["--mode", "noise-floor"])
        .assert()
        .code(2);
    let c = write("c.jsonl", &[3.0, 2.0, 1.0 + 2e-2]);
    // Envelope 1e-2/3 per step, signal 2e-2/3: ratio 2 < 3 passes.
    meshparity()
        .arg("compare")
        .arg(&a)
        .arg(&c)
        .args(["--mode", "noise-floor", "--baseline2"])
        .arg(&b)
        .assert()
        .code(0);
}

/// The gradient norm has its own per-step limit (the curve level's `grad_norm` key): its RATIO
/// column is in units of that limit, not of `rel`, so a failing gradient norm never reads as
/// a fraction of its limit.
#[test]
fn compare_curves_rates_the_gradient_norm_by_its_own_limit() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, norms: &[f64]| {
        let text: String = norms
            .iter()
            .enumerate()
            .map(|(i, g)| format!("{{\"step\":{},\"loss\":2.0,\"grad_norm\":{g}}}\n", i + 1))
            .collect();
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let a = write("a.jsonl", &[1.0, 1.0, 1.0]);
    let b = write("b.jsonl", &[1.0, 1.0, 1.0 + 2e-3]);
    let out = meshparity()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["-t", "rel=1e-1", "-t", "grad_norm=1e-3"])
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("grad_norm"))
        .unwrap_or_else(|| panic!("a grad_norm row: {text}"));
    assert!(row.contains("2.00×  FAIL at step(s) [3]"), "{text}");
    assert!(text.contains("(grad_norm ≤ 1.000e-3)"), "{text}");
}

#[test]
fn list_devices_shows_the_cpu_first_and_says_whether_gpus_are_built_in() {
    let out = stdout(meshparity().args(["list", "devices", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["gpu_backend_built"], cfg!(feature = "gpu"));
    assert_eq!(v["devices"][0]["device"], "cpu");
    assert_eq!(v["devices"][0]["api"], "flex");
    for (n, d) in v["devices"].as_array().unwrap().iter().enumerate().skip(1) {
        let want = if n == 1 {
            "gpu".to_owned()
        } else {
            format!("gpu:{}", n - 1)
        };
        assert_eq!(d["device"], want.as_str());
    }
    let table = stdout(meshparity().args(["list", "devices"]));
    assert!(table.starts_with("DEVICE"), "{table}");
    assert!(table.contains("flex (CPU)"), "{table}");
}

#[test]
fn plan_on_a_gpu_uses_the_gpu_tolerance_table() {
    let out = stdout(meshparity().args([
        "plan",
        "examples/quickstart.toml",
        "--device",
        "gpu",
        "--format",
        "json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 110);
    for j in jobs {
        assert_eq!(j["device"], "gpu", "{j}");
        if let Some(t) = j.get("tolerance") {
            assert_eq!(t, "builtin-gpu", "{j}");
        }
    }
    meshparity()
        .args(["plan", "examples/quickstart.toml", "--device", "tpu"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("`tpu` is not a device"));
}

#[cfg(not(feature = "gpu"))]
#[test]
fn a_gpu_run_on_a_build_without_the_gpu_backend_says_how_to_get_one() {
    let dir = tempfile::tempdir().unwrap();
    meshparity()
        .args([
            "run",
            "examples/quickstart.toml",
            "--device",
            "gpu",
            "--run-dir",
        ])
        .arg(dir.path().join("run"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--features gpu"));
    assert!(
        !dir.path().join("run").exists(),
        "nothing starts when the device is missing"
    );
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
