//! Regression tests for the defects found by driving `meshparity compare` on a real external
//! trainer's outputs (issue "verdicts that never cry wolf", item 4). Each failed before its fix.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn meshparity() -> Command {
    let mut c = Command::cargo_bin("meshparity").unwrap();
    c.env("NO_COLOR", "1");
    c
}

/// (name, safetensors dtype, values as f32, stored in that dtype).
fn checkpoint(dir: &Path, file: &str, tensors: &[(&str, &str, &[f32])]) -> PathBuf {
    let mut header = String::from("{");
    let mut data = Vec::new();
    for (i, (name, dtype, values)) in tensors.iter().enumerate() {
        let start = data.len();
        for v in *values {
            match *dtype {
                "F32" => data.extend_from_slice(&v.to_le_bytes()),
                "F64" => data.extend_from_slice(&(*v as f64).to_le_bytes()),
                other => panic!("{other}"),
            }
        }
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{start},{}]}}"#,
            values.len(),
            data.len()
        ));
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&data);
    let path = dir.join(file);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn curve(dir: &Path, file: &str, lines: &[&str]) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn run(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = meshparity().arg("compare").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

macro_rules! args {
    ($($a:expr),* $(,)?) => { &[$(std::ffi::OsStr::new(&$a)),*] };
}

#[test]
fn a_curve_profile_on_checkpoints_is_refused_not_a_silent_match() {
    let d = tempfile::tempdir().unwrap();
    let a = checkpoint(d.path(), "a.safetensors", &[("w", "F32", &[1.0, 2.0])]);
    let b = checkpoint(d.path(), "b.safetensors", &[("w", "F32", &[1.0, 9.0])]);
    let (code, out, err) = run(args![a, b, "--profile", "curve-f32"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("does not apply to checkpoints"), "{err}");
    let (code, _, err) = run(args![a, b, "-t", "rel=1e-3"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("-t rel=... does not apply to checkpoints"),
        "{err}"
    );
    let (code, _, err) = run(args![a, b, "--profile", "routing-f32"]);
    assert_eq!(
        code, 2,
        "a profile that gates nothing these tensors provide: {err}"
    );
    assert!(err.contains("nothing was gated"), "{err}");
}

#[test]
fn tolerance_settings_replace_the_profile_and_the_header_names_the_gates() {
    let d = tempfile::tempdir().unwrap();
    let a = checkpoint(d.path(), "a.safetensors", &[("w", "F32", &[1.0, 2.0, 3.0])]);
    let b = checkpoint(
        d.path(),
        "b.safetensors",
        &[("w", "F32", &[1.0, 2.0, 3.0001])],
    );
    // relative_l2 asked for: allclose (which this fails) is no longer gated.
    let (code, out, _) = run(args![a, b, "-t", "relative_l2=1e-3"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("gates:     relative_l2 ≤ 1.000e-3"), "{out}");
    assert!(!out.contains("allclose("), "{out}");
    // rtol alone: atol is 0, not the profile's 1e-5, and the header says so.
    let (_, out, _) = run(args![a, b, "-t", "rtol=3e-2"]);
    assert!(out.contains("allclose(atol=0, rtol=3.000e-2)"), "{out}");
    let (_, out, _) = run(args![a, b]);
    assert!(
        out.contains("allclose(atol=1.000e-5, rtol=1.300e-6)"),
        "{out}"
    );
}

#[test]
fn a_bit_identical_noise_floor_is_handled_and_investigate_is_not_a_pass() {
    let d = tempfile::tempdir().unwrap();
    let base = [
        "{\"step\": 1, \"loss\": 4.0}",
        "{\"step\": 2, \"loss\": 3.0}",
    ];
    let a = curve(d.path(), "a.jsonl", &base);
    let a2 = curve(d.path(), "a2.jsonl", &base);
    let round_off = curve(
        d.path(),
        "c.jsonl",
        &[
            "{\"step\": 1, \"loss\": 4.000001}",
            "{\"step\": 2, \"loss\": 3.0}",
        ],
    );
    let args_nf = |c: &Path| {
        let mut v: Vec<std::ffi::OsString> = vec![a.clone().into(), c.into()];
        for s in ["--mode", "noise-floor", "--baseline2"] {
            v.push(s.into());
        }
        v.push(a2.clone().into());
        v
    };
    let out = meshparity()
        .arg("compare")
        .args(args_nf(&round_off))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "round-off passes: {text}");
    assert!(text.contains("bit-identical"), "{text}");
    let bug = curve(
        d.path(),
        "bug.jsonl",
        &[
            "{\"step\": 1, \"loss\": 4.1}",
            "{\"step\": 2, \"loss\": 3.0}",
        ],
    );
    let out = meshparity()
        .arg("compare")
        .args(args_nf(&bug))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Between investigate (3) and fail (5): exit 1, said on stderr.
    let b2 = curve(
        d.path(),
        "b2.jsonl",
        &[
            "{\"step\": 1, \"loss\": 4.01}",
            "{\"step\": 2, \"loss\": 3.01}",
        ],
    );
    let mid = curve(
        d.path(),
        "mid.jsonl",
        &[
            "{\"step\": 1, \"loss\": 4.04}",
            "{\"step\": 2, \"loss\": 3.04}",
        ],
    );
    let out = meshparity()
        .arg("compare")
        .args([&a, &mid])
        .args(["--mode", "noise-floor", "--baseline2"])
        .arg(&b2)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("INVESTIGATE is not a pass"));
}

#[test]
fn token_counts_are_gated_extra_metrics_said_overrides_refused_and_step_keys_named() {
    let d = tempfile::tempdir().unwrap();
    let a = curve(
        d.path(),
        "a.jsonl",
        &["{\"step\": 1, \"loss\": 4.0, \"num_tokens\": 800, \"tok_per_s\": 10}"],
    );
    let b = curve(
        d.path(),
        "b.jsonl",
        &["{\"step\": 1, \"loss\": 4.0, \"num_tokens\": 640, \"tok_per_s\": 99, \"grad_norm\": 1}"],
    );
    let (code, out, _) = run(args![a, b]);
    assert_eq!(code, 1, "a wrong token count is a correctness bug: {out}");
    assert!(out.contains("num_tokens"), "{out}");
    assert!(
        out.contains("reported (performance, not gated)"),
        "tok_per_s: {out}"
    );
    assert!(out.contains("not compared: `grad_norm`"), "{out}");
    let (code, _, err) = run(args![a, b, "--override", "loss:rel=1"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--override, --layer-average, --rename and --cast apply to checkpoints only"),
        "{err}"
    );
    let it = |f: &str, loss: f64| {
        curve(
            d.path(),
            f,
            &[&format!("{{\"iteration\": 10, \"lm loss\": {loss}}}")],
        )
    };
    let (x, y) = (it("x.jsonl", 2.0), it("y.jsonl", 2.0));
    let (code, _, err) = run(args![x, y]);
    assert_eq!(code, 2);
    assert!(err.contains("--step-key"), "{err}");
    let (code, out, _) = run(args![x, y, "--step-key", "iteration"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn structural_problems_are_always_listed_and_the_table_says_what_it_hid() {
    let d = tempfile::tempdir().unwrap();
    let a = checkpoint(
        d.path(),
        "a.safetensors",
        &[("w", "F32", &[1.0]), ("v", "F32", &[2.0])],
    );
    let f64s = checkpoint(
        d.path(),
        "b.safetensors",
        &[("w", "F64", &[1.0]), ("v", "F64", &[2.0])],
    );
    let (code, _, err) = run(args![a, f64s]);
    assert_eq!(code, 2);
    assert!(
        err.contains("`w`: dtype F32 in the reference, F64 in the candidate"),
        "{err}"
    );
    assert!(
        err.contains("`v`: dtype F32"),
        "every problem is listed: {err}"
    );
    let many: Vec<(String, [f32; 1])> = (0..6).map(|i| (format!("t{i}"), [i as f32])).collect();
    let refs: Vec<(&str, &str, &[f32])> = many
        .iter()
        .map(|(n, v)| (n.as_str(), "F32", &v[..]))
        .collect();
    let r = checkpoint(d.path(), "r.safetensors", &refs);
    let nan = [f32::NAN];
    let mut cand = refs.clone();
    cand[0].2 = &nan;
    let c = checkpoint(d.path(), "c.safetensors", &cand);
    let (code, out, _) = run(args![r, c, "--worst", "2"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL (structural problem above)"),
        "a NaN row is not ok: {out}"
    );
    assert!(out.contains("and 4 more tensor(s) not shown"), "{out}");
}

/// A correct bf16 pair compared by hand (issue 61, item 5): `auto` gates it as the oracle level
/// does in bf16 — the dtype from the runs' manifests, though the files hold f32 weights and
/// bf16 gradients — and says so; element-wise allclose (`--profile default`, the old default)
/// cried MISMATCH on every tensor. The gates line names each set of limits once.
#[test]
fn compare_picks_the_limits_of_the_files_level_and_dtype() {
    let fx = tempfile::tempdir().unwrap();
    let spec =
        "[run]\nname = \"bf\"\nsteps = 2\nbatch = 4\n[models.tiny]\nlayers = 2\nhidden = 32\n\
                heads = 4\nkv_heads = 2\nffn = 48\nvocab = 64\nseq_len = 8\ndtype = \"bf16\"\n\
                [meshes.tp2]\ntp = 2\n[[matrix]]\nlevels = [\"oracle\", \"curve\"]\n\
                [mutations]\nselect = []\n";
    std::fs::write(fx.path().join("spec.toml"), spec).unwrap();
    meshparity()
        .current_dir(fx.path())
        .env("MESHPARITY_NO_SHRINK", "1")
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .assert()
        .code(0);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx.path().join("run/results.json")).unwrap())
            .unwrap();
    let dir = |kind: &str| {
        let j = r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["kind"] == kind)
            .unwrap();
        PathBuf::from(j["detail"]["artifacts"].as_str().unwrap())
    };
    let (reference, run) = (dir("reference"), dir("train"));
    let compare = |file: &str, extra: &[&str]| {
        let out = meshparity()
            .arg("compare")
            .arg(reference.join(file))
            .arg(run.join(file))
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = compare("grads.safetensors", &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("profile `oracle-bf16` (auto)") && text.contains("its manifest.json"),
        "{text}"
    );
    let gates = text.lines().find(|l| l.starts_with("gates:")).unwrap();
    assert_eq!(
        gates.matches("mean_abs_pct ≤ 1.200e1").count(),
        2,
        "{gates}"
    );
    assert!(
        gates.contains("for `grad_norm`") && !gates.contains(", ("),
        "{gates}"
    );
    let (code, text) = compare("weights.safetensors", &[]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = compare("curve.jsonl", &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("profile `curve-bf16` (auto)"), "{text}");
    let (code, text) = compare("grads.safetensors", &["--profile", "default"]);
    assert_eq!(code, Some(1), "allclose on a bf16 pair: {text}");
}
