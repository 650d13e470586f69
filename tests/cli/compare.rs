//! `meshparity compare`: checkpoints and curves from the command line, exit codes and formats.

use crate::common::{cli as meshparity, stdout};

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
