//! Fuzzing what users hand-write and hand over: specs, and the inputs of `compare`.
//!
//! Specs are the examples and the broken-spec corpus, mutated 1–4 times each (lines deleted,
//! duplicated, swapped or cut; values replaced with hostile ones; keys renamed; tables and
//! includes of devices, FIFOs and the spec itself inserted; raw and invalid UTF-8 bytes).
//! Compare inputs are valid safetensors files and curves with their bytes, headers and lines
//! broken. Properties: no panic, no hang, and every spec error located (file:line:column, or
//! the byte offset of text that is not UTF-8).
//!
//! Bounded for CI (about 10 s): `MESHPARITY_FUZZ_SPECS` (default 10,000), `MESHPARITY_FUZZ_INPUTS`
//! (default 1,000) and `MESHPARITY_FUZZ_CLI` (default 100) cases from seed
//! `MESHPARITY_FUZZ_SEED` (default: fixed; printed with every failure).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use meshparity_compare::{compare_checkpoints, compare_curves, CurveOptions, TensorOptions};
use meshparity_specs::SpecError;

/// Longer than any case takes; a case past it is a hang.
const DEADLINE: Duration = Duration::from_secs(30);

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Run `f` on another thread; panic (naming `case`) if it panics or outlives [`DEADLINE`].
fn bounded<T: Send + 'static>(case: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(Ok(v)) => v,
        Ok(Err(_)) => panic!("{case}: panicked"),
        Err(_) => panic!("{case}: still running after {DEADLINE:?} (a hang)"),
    }
}

const HOSTILE_VALUES: &[&str] = &[
    "-1",
    "0",
    "1e308",
    "-1e308",
    "18446744073709551616",
    "9223372036854775807",
    "4294967296",
    "nan",
    "inf",
    "\"\"",
    "\"x\"",
    "true",
    "[]",
    "{}",
    "[1, \"a\"]",
    "{ a = 1 }",
    "\"../../x\"",
    "\"/abs\"",
    "\"a\u{FFFE}b\"",
    "\"*\"",
    "\"!*\"",
    "\"{{out_dir}}\"",
    "\"{{nope}}\"",
    "1.5",
    "2",
    "3",
    "65536",
    "\"gpu:7\"",
    "\"bf16\"",
    "\"f64\"",
];

const HOSTILE_INCLUDES: &[&str] = &[
    "/dev/zero",
    "/dev/urandom",
    "fifo",
    "/",
    ".",
    "spec.toml",
    "missing.toml",
    "../../../../../../etc/hostname",
];

const HEADERS: &[&str] = &[
    "[models.x]\nlayers = 1\n",
    "[meshes.y]\ndp = 2\n",
    "[[matrix]]\nmodels = [\"x\"]\n",
    "[run]\n",
    "[tolerances.t]\nextends = \"t\"\n",
    "[engines.e]\nkind = \"command\"\nprogram = \"true\"\n",
    "[variants.v]\ngit = \"HEAD\"\n",
    "[mutations]\nselect = [\"all\"]\n",
];

/// The corpus: every example spec and every broken one, copied into `into` with the
/// directory layout kept (so their includes resolve) and a FIFO in every directory.
fn corpus(into: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![
        PathBuf::from("examples"),
        PathBuf::from("specs/tests/broken"),
    ];
    while let Some(dir) = dirs.pop() {
        let copy = into.join(&dir);
        std::fs::create_dir_all(&copy).unwrap();
        let fifo = std::ffi::CString::new(copy.join("fifo").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "toml" || x == "py") {
                let text = std::fs::read_to_string(&p).unwrap();
                std::fs::write(into.join(&p), &text).unwrap();
                if p.extension().is_some_and(|x| x == "toml") {
                    out.push((into.join(&p), text));
                }
            }
        }
    }
    out.sort();
    out
}

fn mutate(rng: &mut fastrand::Rng, text: &str) -> Vec<u8> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut tail: Vec<u8> = Vec::new();
    for _ in 0..rng.usize(1..=4) {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let i = rng.usize(..lines.len());
        match rng.u8(..10) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                let j = rng.usize(..=lines.len());
                lines.insert(j, l);
            }
            2 => {
                let j = rng.usize(..lines.len());
                lines.swap(i, j);
            }
            3 | 4 => {
                if let Some((key, _)) = lines[i].split_once('=') {
                    let v = HOSTILE_VALUES[rng.usize(..HOSTILE_VALUES.len())];
                    lines[i] = format!("{key}= {v}");
                }
            }
            5 => {
                if let Some((_, value)) = lines[i].split_once('=') {
                    let key = [
                        "dp", "tp", "pp", "cp", "ep", "sp", "seq_len", "family", "levels", "x y",
                        "\"\"",
                    ];
                    lines[i] = format!("{} ={value}", key[rng.usize(..key.len())]);
                }
            }
            6 => {
                let h = HEADERS[rng.usize(..HEADERS.len())];
                lines.insert(i, h.to_owned());
            }
            7 => {
                let inc = HOSTILE_INCLUDES[rng.usize(..HOSTILE_INCLUDES.len())];
                lines.insert(0, format!("include = [\"{inc}\"]"));
            }
            8 => {
                let cut = rng.usize(..=lines[i].len());
                let cut = (0..=cut)
                    .rev()
                    .find(|&c| lines[i].is_char_boundary(c))
                    .unwrap_or(0);
                lines[i].truncate(cut);
            }
            _ => {
                // Raw bytes, invalid UTF-8 included, appended at the end.
                let n = rng.usize(1..8);
                tail.extend((0..n).map(|_| rng.u8(..)));
            }
        }
    }
    let mut bytes = lines.join("\n").into_bytes();
    bytes.push(b'\n');
    bytes.extend(tail);
    bytes
}

/// Every error of a spec that did not load says where it is.
fn located(err: &SpecError) -> Result<(), String> {
    match err {
        SpecError::Read { source, .. } => {
            let m = source.to_string();
            if m.contains("UTF-8") && !m.contains("at byte") {
                return Err(format!("UTF-8 error without its byte: {m}"));
            }
            Ok(())
        }
        SpecError::Invalid(diags) => {
            if diags.error_count() == 0 {
                return Err("invalid, with no error".into());
            }
            for line in diags.render(false).lines() {
                let Some(rest) = line.strip_prefix("error: ") else {
                    continue;
                };
                let pos = rest.split(": ").next().unwrap_or("");
                let mut parts = pos.rsplitn(3, ':');
                let col = parts.next().and_then(|c| c.parse::<u32>().ok());
                let line_no = parts.next().and_then(|c| c.parse::<u32>().ok());
                if col.is_none() || line_no.is_none() {
                    return Err(format!("an error without file:line:column: {line}"));
                }
            }
            Ok(())
        }
    }
}

#[test]
fn mutated_specs_never_panic_or_hang_and_every_error_is_located() {
    let seed = env("MESHPARITY_FUZZ_SEED", 20261124);
    let count = env("MESHPARITY_FUZZ_SPECS", 10_000);
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path());
    assert!(corpus.len() >= 8, "{corpus:?}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut valid, mut invalid) = (0, 0);
    for n in 0..count {
        let (origin, text) = &corpus[rng.usize(..corpus.len())];
        let bytes = mutate(&mut rng, text);
        // Beside its original, so its own includes still resolve.
        let spec = origin.with_file_name(format!("case-{n}.toml"));
        std::fs::write(&spec, &bytes).unwrap();
        let case = format!("seed {seed} case {n} (from {})", origin.display());
        let loaded = {
            let spec = spec.clone();
            bounded(&case, move || {
                let loaded = meshparity_specs::load(&spec);
                if let Ok(l) = &loaded {
                    let plan = meshparity_runner::Plan::build(&l.spec);
                    let filter = meshparity_runner::Filter::parse::<&str>(&[]).unwrap();
                    let _ = plan.select(&filter, None);
                }
                loaded.map(|_| ())
            })
        };
        match loaded {
            Ok(()) => valid += 1,
            Err(e) => {
                invalid += 1;
                if let Err(why) = located(&e) {
                    let kept = dir.keep();
                    panic!("{case}: {why} (kept: {})", kept.join(&spec).display());
                }
            }
        }
        let _ = std::fs::remove_file(&spec);
    }
    eprintln!(
        "{count} mutated specs (seed {seed}): {valid} valid, {invalid} refused with located errors"
    );
    assert!(
        invalid > count / 4 && valid > 0,
        "mutations too weak or too strong"
    );
}

/// `validate` and `plan` of mutated specs on the real binary: exit codes only from the
/// documented set, never a panic (also covers the engine support and memory checks).
#[test]
fn mutated_specs_through_the_cli() {
    let seed = env("MESHPARITY_FUZZ_SEED", 20261124) + 1;
    let count = env("MESHPARITY_FUZZ_CLI", 100);
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path());
    let mut rng = fastrand::Rng::with_seed(seed);
    for n in 0..count {
        let (origin, text) = &corpus[rng.usize(..corpus.len())];
        let spec = origin.with_file_name(format!("case-{n}.toml"));
        std::fs::write(&spec, mutate(&mut rng, text)).unwrap();
        for cmd in ["validate", "plan"] {
            let out = assert_cmd::Command::cargo_bin("meshparity")
                .unwrap()
                .args([cmd, spec.to_str().unwrap()])
                .timeout(DEADLINE)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let code = out.status.code();
            if !matches!(code, Some(0 | 2 | 4)) || err.contains("panicked") {
                let text = std::fs::read_to_string(&spec).unwrap_or_default();
                let _ = std::fs::remove_file(&spec);
                panic!("seed {seed} case {n}: `{cmd}` exited {code:?}: {err}\n--- spec:\n{text}");
            }
        }
        let _ = std::fs::remove_file(&spec);
    }
}

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
    let seed = env("MESHPARITY_FUZZ_SEED", 20261124) + 2;
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
