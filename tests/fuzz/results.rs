//! `results.json` as `report` and `report --merge` read it: a real run's results (passes, a
//! failed check with its findings, a caught mutation, a skipped job), broken as bytes (cut,
//! flipped) and as JSON (a node replaced with a hostile value, a key or a job removed, a job
//! doubled). Properties: reading refuses or accepts without panic; an accepted run renders
//! JUnit that XML parsers read, HTML and Markdown in bounded time; merging it with itself and
//! with a broken copy of itself is a result or an error, never a panic. A share of cases goes
//! through the real binary (`report`, `report --merge`): exit codes from the documented set.

use std::path::Path;

use meshparity_reports::{html, junit, markdown, merge, RunResults, FORMAT_VERSION};
use serde_json::Value;

use crate::{bounded, env, seed, DEADLINE};

/// A small run to break: dp2 and tp2 forward, a curve with an impossible limit (a failed
/// check), two caught mutations.
const SPEC: &str = r#"
[run]
name = "fuzz"
seed = 5
steps = 2
batch = 4

[models.tiny]
family = "llama"
layers = 1
hidden = 16
heads = 2
kv_heads = 2
ffn = 32
vocab = 32
seq_len = 4

[meshes.dp2]
dp = 2

[meshes.tp2]
tp = 2

[tolerances.impossible]
extends = "builtin"
forward.f32 = { relative_l2 = 1e-30 }

[[matrix]]
models = ["tiny"]
levels = ["forward", "curve"]
tolerance = "impossible"

[mutations]
select = ["dp-skip-grad-all-reduce", "tp-skip-forward-all-reduce"]
"#;

fn sample(dir: &Path) -> Vec<u8> {
    std::fs::write(dir.join("spec.toml"), SPEC).unwrap();
    let out = assert_cmd::Command::cargo_bin("meshparity")
        .unwrap()
        .current_dir(dir)
        .env_remove("MESHPARITY_TEST_FAULT")
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .timeout(DEADLINE * 4)
        .output()
        .unwrap();
    let bytes = std::fs::read(dir.join("run/results.json"))
        .unwrap_or_else(|_| panic!("no results: {}", String::from_utf8_lossy(&out.stderr)));
    let r: RunResults = serde_json::from_slice(&bytes).unwrap();
    let statuses: Vec<&str> = r.jobs.iter().map(|j| j.status.as_str()).collect();
    assert!(
        statuses.contains(&"failed") && statuses.contains(&"passed"),
        "{statuses:?}"
    );
    bytes
}

const HOSTILE: &[&str] = &[
    "null",
    "-1",
    "1e308",
    "18446744073709551616",
    "\"\"",
    "\"]]></x><script>alert(1)</script>&\\u0000\\u001b[31m\"",
    "\"\\ud83d\\ude00 \\u2028 \\u0085\"",
    "[]",
    "{}",
    "true",
    "\"passed\"",
    "\"not-a-status\"",
];

/// A hostile value: one of [`HOSTILE`], a deeply nested array, or a megabyte-long string.
fn hostile(rng: &mut fastrand::Rng) -> Value {
    match rng.usize(..HOSTILE.len() + 2) {
        i if i < HOSTILE.len() => serde_json::from_str(HOSTILE[i]).unwrap(),
        i if i == HOSTILE.len() => (0..100).fold(Value::from(1), |v, _| Value::Array(vec![v])),
        _ => Value::from("<&]]>".repeat(200_000)),
    }
}

/// A random node's path in `v`.
fn pick_path(rng: &mut fastrand::Rng, v: &Value) -> Vec<String> {
    let mut path = Vec::new();
    let mut node = v;
    loop {
        let keys: Vec<String> = match node {
            Value::Object(m) => m.keys().cloned().collect(),
            Value::Array(a) => (0..a.len()).map(|i| i.to_string()).collect(),
            _ => break,
        };
        if keys.is_empty() || (!path.is_empty() && rng.u8(..4) == 0) {
            break;
        }
        let k = keys[rng.usize(..keys.len())].clone();
        node = match node {
            Value::Object(m) => &m[&k],
            Value::Array(a) => &a[k.parse::<usize>().unwrap()],
            _ => unreachable!(),
        };
        path.push(k);
    }
    path
}

fn node_mut<'a>(v: &'a mut Value, path: &[String]) -> &'a mut Value {
    path.iter().fold(v, |n, k| match n {
        Value::Array(a) => &mut a[k.parse::<usize>().unwrap()],
        n => &mut n[k.as_str()],
    })
}

fn broken(rng: &mut fastrand::Rng, good: &[u8]) -> Vec<u8> {
    match rng.u8(..8) {
        0 => good[..rng.usize(..good.len())].to_vec(),
        1 => {
            let mut b = good.to_vec();
            for _ in 0..rng.usize(1..6) {
                let i = rng.usize(..b.len());
                b[i] = rng.u8(..);
            }
            b
        }
        2 => good.to_vec(),
        _ => {
            let mut v: Value = serde_json::from_slice(good).unwrap();
            for _ in 0..rng.usize(1..4) {
                let path = pick_path(rng, &v);
                let Some((last, parent)) = path.split_last() else {
                    continue;
                };
                match rng.u8(..4) {
                    0 => {
                        let p = node_mut(&mut v, parent);
                        match p {
                            Value::Object(m) => {
                                m.remove(last);
                            }
                            Value::Array(a) => {
                                a.remove(last.parse::<usize>().unwrap());
                            }
                            _ => {}
                        }
                    }
                    1 => {
                        let p = node_mut(&mut v, parent);
                        if let Value::Array(a) = p {
                            let dup = a[last.parse::<usize>().unwrap()].clone();
                            a.push(dup);
                        }
                    }
                    _ => {
                        *node_mut(&mut v, &path) = hostile(rng);
                    }
                }
            }
            serde_json::to_vec(&v).unwrap()
        }
    }
}

/// Every event of `xml` read by a real XML parser.
fn well_formed(xml: &str) -> Result<(), String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(format!("at byte {}: {e}", reader.buffer_position())),
        }
    }
}

#[test]
fn broken_results_never_panic_and_render_well_formed() {
    let seed = seed(4);
    let count = env("MESHPARITY_FUZZ_RESULTS", 300);
    let dir = tempfile::tempdir().unwrap();
    let good = sample(dir.path());
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut read, mut refused) = (0, 0);
    for n in 0..count {
        let bytes = broken(&mut rng, &good);
        let other = broken(&mut rng, &good);
        let case = format!("seed {seed} case {n}");
        let path = dir.path().join(format!("case-{n}.json"));
        std::fs::write(&path, &bytes).unwrap();
        let accepted = bounded(&case, move || {
            let Ok(r) = serde_json::from_slice::<RunResults>(&bytes) else {
                return false;
            };
            if r.format_version != FORMAT_VERSION {
                return false;
            }
            let xml = junit::junit(&r);
            if let Err(e) = well_formed(&xml) {
                panic!("JUnit is not well-formed XML {e}");
            }
            let _ = html::html(&r);
            let _ = markdown::markdown(&r, "report.html");
            let _ = merge::merge(vec![r.clone(), r.clone()]);
            if let Ok(o) = serde_json::from_slice::<RunResults>(&other) {
                let _ = merge::merge(vec![r, o]);
            }
            true
        });
        if accepted {
            read += 1;
        } else {
            refused += 1;
        }
        // One case in ten through the binary, as `report` and `report --merge`.
        if n % 10 == 0 {
            cli(dir.path(), &path, &case);
        }
        let _ = std::fs::remove_file(&path);
    }
    eprintln!("{count} broken results (seed {seed}): {read} read and rendered, {refused} refused");
    assert!(read > 0 && refused > 0);
}

fn cli(dir: &Path, path: &Path, case: &str) {
    let good = dir.join("run/results.json");
    let out_dir = dir.join("merged");
    let runs = [
        vec!["report".to_owned(), path.display().to_string()],
        vec![
            "report".into(),
            "--merge".into(),
            good.display().to_string(),
            path.display().to_string(),
            "--out".into(),
            out_dir.display().to_string(),
        ],
    ];
    for args in runs {
        let out = assert_cmd::Command::cargo_bin("meshparity")
            .unwrap()
            .args(&args)
            .timeout(DEADLINE)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        assert!(
            matches!(code, Some(0..=3)) && !err.contains("panicked"),
            "{case}: `{}` exited {code:?}: {err}",
            args.join(" ")
        );
    }
}
