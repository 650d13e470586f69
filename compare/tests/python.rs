//! Files from the reference implementation: Python's `safetensors` + `numpy` write a fixture
//! that our reader must read bit-exactly, and must read the files our writer makes.
//!
//! `.ci/run` installs both packages; without them a developer run says so and passes, but under
//! CI (`CI` set) their absence fails the test.

mod common;

use std::process::Command;

use common::*;
use meshparity_compare::{compare_checkpoints, TensorDtype as D, TensorOptions, Verdict};

const SCRIPT: &str = "../tests/consumers/safetensors_fixture.py";

fn python_ready() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import numpy, safetensors.numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run this: `pip install safetensors numpy` (see .ci/run)"
        );
        eprintln!("SKIPPED: python3 with safetensors and numpy not found");
    }
    ok
}

/// The same tensors the script's `tensors()` makes, written by our writer.
fn ours() -> Vec<T> {
    let i: Vec<i64> = (0..24).collect();
    let float = |f: &dyn Fn(f64) -> Vec<u8>| -> Vec<u8> {
        i.iter().flat_map(|&x| f(x as f64 * 0.25 - 3.0)).collect()
    };
    let int =
        |f: &dyn Fn(i64) -> Vec<u8>| -> Vec<u8> { i.iter().flat_map(|&x| f(x * 7 - 50)).collect() };
    let s = vec![4, 6];
    vec![
        T(
            "float64",
            D::F64,
            s.clone(),
            float(&|x| x.to_le_bytes().to_vec()),
        ),
        T(
            "float32",
            D::F32,
            s.clone(),
            float(&|x| (x as f32).to_le_bytes().to_vec()),
        ),
        T(
            "float16",
            D::F16,
            s.clone(),
            float(&|x| half::f16::from_f64(x).to_le_bytes().to_vec()),
        ),
        T(
            "int64",
            D::I64,
            s.clone(),
            int(&|x| x.to_le_bytes().to_vec()),
        ),
        T(
            "int32",
            D::I32,
            s.clone(),
            int(&|x| (x as i32).to_le_bytes().to_vec()),
        ),
        T(
            "int16",
            D::I16,
            s.clone(),
            int(&|x| (x as i16).to_le_bytes().to_vec()),
        ),
        T(
            "int8",
            D::I8,
            s.clone(),
            int(&|x| (x as i8).to_le_bytes().to_vec()),
        ),
        T(
            "uint64",
            D::U64,
            s.clone(),
            int(&|x| (x as u64).to_le_bytes().to_vec()),
        ),
        T(
            "uint32",
            D::U32,
            s.clone(),
            int(&|x| (x as u32).to_le_bytes().to_vec()),
        ),
        T(
            "uint16",
            D::U16,
            s.clone(),
            int(&|x| (x as u16).to_le_bytes().to_vec()),
        ),
        T("uint8", D::U8, s.clone(), int(&|x| vec![x as u8])),
        T(
            "bool",
            D::BOOL,
            s,
            i.iter().map(|x| (x % 2 == 0) as u8).collect(),
        ),
    ]
}

#[test]
fn reference_implementation_files_round_trip_both_ways() {
    if !python_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("python3")
        .arg(SCRIPT)
        .arg("write")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let mine = save(dir.path(), "ours.safetensors", &ours());
    let theirs = dir.path().join("python.safetensors");

    let r = compare_checkpoints(&theirs, &mine, &TensorOptions::default()).unwrap();
    assert_eq!(r.verdict, Verdict::Match, "{:?}", r.problems);
    assert_eq!(r.counts.tensors_compared, 12);
    assert!(
        r.tensors.iter().all(|t| t.metrics.bit_exact),
        "every dtype reads bit-exactly"
    );

    let bumped = dir.path().join("python-bumped.safetensors");
    let r = compare_checkpoints(&theirs, &bumped, &TensorOptions::default()).unwrap();
    assert_eq!(r.counts.tensors_failed, 12);
    for t in &r.tensors {
        assert_eq!(t.metrics.bit_mismatched, 1, "{}", t.name);
    }

    let out = Command::new("python3")
        .arg(SCRIPT)
        .arg("read")
        .arg(&mine)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python could not read our file: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}
