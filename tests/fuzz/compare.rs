//! The inputs of `compare`: valid safetensors files and curves with their bytes, headers and
//! lines broken.

use std::path::{Path, PathBuf};

use meshparity_compare::{compare_checkpoints, compare_curves, CurveOptions, TensorOptions};

use crate::{bounded, env, seed};

/// A safetensors file of `tensors` (name, dtype, shape, bytes).
fn safetensors(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    let mut data: Vec<u8> = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            (*name).into(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes.len()]}),
        );
        offset += bytes.len();
        data.extend(bytes);
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while !(8 + h.len()).is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

const HOSTILE_HEADERS: &[&str] = &[
    r#"{"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,16]}}"#,
    r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[8,0]}}"#,
    r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,18446744073709551615]}}"#,
    r#"{"w":{"dtype":"X9","shape":[4],"data_offsets":[0,16]}}"#,
    r#"{"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}}"#,
    r#"{"w":{"dtype":"F32","shape":[4]}}"#,
    r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"v":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
    r#"{"__metadata__":{"a":{"b":1}},"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
    r#"{"w":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}"#,
    r#"{"w":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}"#,
    r#"{"logits":{"dtype":"F32","shape":[0,0],"data_offsets":[0,0]}}"#,
    r#"{"w":1}"#,
    r#"[]"#,
    r#"{"#,
];

fn broken_checkpoint(rng: &mut fastrand::Rng) -> Vec<u8> {
    let values: Vec<u8> = (0..16).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let good = safetensors(&[
        ("w", "F32", vec![4, 4], values.clone()),
        ("logits", "F32", vec![2, 8], values.clone()),
        ("h", "BF16", vec![8], values[..16].to_vec()),
    ]);
    match rng.u8(..5) {
        0 => good[..rng.usize(..good.len())].to_vec(),
        1 => {
            let mut b = good;
            for _ in 0..rng.usize(1..6) {
                let i = rng.usize(..b.len());
                b[i] = rng.u8(..);
            }
            b
        }
        2 => {
            let mut b = good;
            b[..8].copy_from_slice(&rng.u64(..).to_le_bytes());
            b
        }
        3 => {
            let h = HOSTILE_HEADERS[rng.usize(..HOSTILE_HEADERS.len())].as_bytes();
            let mut b = (h.len() as u64).to_le_bytes().to_vec();
            b.extend(h);
            b.extend(&values);
            b
        }
        _ => good,
    }
}

const HOSTILE_LINES: &[&str] = &[
    r#"{"step": 1, "loss": 1e400}"#,
    r#"{"step": -1, "loss": 1.0}"#,
    r#"{"step": 18446744073709551616, "loss": 1.0}"#,
    r#"{"step": 1.5, "loss": 1.0}"#,
    r#"{"step": 1, "loss": {"a": 1}}"#,
    r#"{"step": 1, "loss": [1, 2]}"#,
    r#"{"step": 1, "loss": NaN}"#,
    r#"{"step": 1, "loss": -Infinity}"#,
    r#"{"step": 1, "loss": "4.7"}"#,
    r#"{"step": 1, "loss": null}"#,
    r#"{"step": 2}"#,
    r#"[1, 2]"#,
    r#"{"step": 1, "loss": 1.0"#,
    "\u{FEFF}{\"step\": 3, \"loss\": 1.0}",
];

fn broken_curve(rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut lines: Vec<String> = (1..=5)
        .map(|s| {
            format!(
                r#"{{"step": {s}, "loss": {}, "tokens": 64}}"#,
                3.0 / s as f64
            )
        })
        .collect();
    for _ in 0..rng.usize(1..4) {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let i = rng.usize(..lines.len());
        match rng.u8(..4) {
            0 => lines[i] = HOSTILE_LINES[rng.usize(..HOSTILE_LINES.len())].into(),
            1 => {
                lines.remove(i);
            }
            2 => lines.push(lines[i].clone()),
            _ => {
                let cut = rng.usize(..=lines[i].len());
                let cut = (0..=cut)
                    .rev()
                    .find(|&c| lines[i].is_char_boundary(c))
                    .unwrap_or(0);
                lines[i].truncate(cut);
            }
        }
    }
    let mut b = lines.join("\n").into_bytes();
    if rng.bool() {
        b.extend([0xff, 0xfe, b'\n']);
    }
    b
}

#[test]
fn broken_compare_inputs_never_panic_or_hang() {
    let seed = seed(2);
    let count = env("MESHPARITY_FUZZ_INPUTS", 1_000);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut ok, mut refused) = (0, 0);
    for n in 0..count {
        let checkpoint = rng.bool();
        let ext = if checkpoint { "safetensors" } else { "jsonl" };
        let (a, b): (PathBuf, PathBuf) = (
            dir.path().join(format!("{n}-a.{ext}")),
            dir.path().join(format!("{n}-b.{ext}")),
        );
        let (x, y) = if checkpoint {
            (broken_checkpoint(&mut rng), broken_checkpoint(&mut rng))
        } else {
            (broken_curve(&mut rng), broken_curve(&mut rng))
        };
        std::fs::write(&a, x).unwrap();
        std::fs::write(&b, y).unwrap();
        let case = format!("seed {seed} case {n}: {} vs {}", a.display(), b.display());
        let result = bounded(&case, move || compare(&a, &b, checkpoint));
        match result {
            Ok(()) => ok += 1,
            Err(_) => refused += 1,
        }
    }
    eprintln!("{count} broken compare inputs (seed {seed}): {ok} compared, {refused} refused");
    assert!(refused > 0 && ok > 0);
}

fn compare(a: &Path, b: &Path, checkpoint: bool) -> Result<(), String> {
    if checkpoint {
        compare_checkpoints(a, b, &TensorOptions::default())
            .map(|_| ())
            .map_err(|e| e.to_string())
    } else {
        let opts = CurveOptions {
            limits: Default::default(),
            step_key: "step".into(),
            baseline2: None,
            gate_performance: false,
        };
        compare_curves(a, b, &opts)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
