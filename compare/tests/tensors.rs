//! Checkpoint comparison end to end, through files written in code.

mod common;

use common::*;
use meshparity_compare::report::ProblemKind;
use meshparity_compare::tolerance::{parse_override, parse_settings};
use meshparity_compare::{
    compare_checkpoints, InputError, Profile, TensorDtype as D, TensorOptions, Tolerance, Verdict,
};

fn run(
    a: &std::path::Path,
    b: &std::path::Path,
    tol: Tolerance,
) -> meshparity_compare::TensorReport {
    let opts = TensorOptions {
        tolerance: tol,
        ..TensorOptions::default()
    };
    compare_checkpoints(a, b, &opts).unwrap()
}

fn kinds(r: &meshparity_compare::TensorReport) -> Vec<ProblemKind> {
    r.problems.iter().map(|p| p.kind).collect()
}

#[test]
fn every_dtype_matches_itself_bit_exactly_and_catches_one_changed_element() {
    let dir = tempfile::tempdir().unwrap();
    let v = values(24, 1);
    let ints: Vec<i64> = (0..24).map(|i| i * 7 - 50).collect();
    let make = |bump: bool| -> Vec<T> {
        let mut v = v.clone();
        let mut ints = ints.clone();
        if bump {
            v[13] += 0.25;
            ints[13] += 1;
        }
        vec![
            T(
                "f64",
                D::F64,
                vec![4, 6],
                f64s(&v.iter().map(|x| *x as f64).collect::<Vec<_>>()),
            ),
            T("f32", D::F32, vec![4, 6], f32s(&v)),
            T("f16", D::F16, vec![4, 6], f16s(&v)),
            T("bf16", D::BF16, vec![4, 6], bf16s(&v)),
            T("i64", D::I64, vec![4, 6], i64s(&ints)),
            T(
                "i32",
                D::I32,
                vec![4, 6],
                ints.iter()
                    .flat_map(|x| (*x as i32).to_le_bytes())
                    .collect(),
            ),
            T(
                "i16",
                D::I16,
                vec![4, 6],
                ints.iter()
                    .flat_map(|x| (*x as i16).to_le_bytes())
                    .collect(),
            ),
            T(
                "i8",
                D::I8,
                vec![4, 6],
                ints.iter().flat_map(|x| (*x as i8).to_le_bytes()).collect(),
            ),
            T(
                "u8",
                D::U8,
                vec![4, 6],
                ints.iter().map(|x| *x as u8).collect(),
            ),
            T(
                "u16",
                D::U16,
                vec![4, 6],
                ints.iter()
                    .flat_map(|x| (*x as u16).to_le_bytes())
                    .collect(),
            ),
            T(
                "u32",
                D::U32,
                vec![4, 6],
                ints.iter()
                    .flat_map(|x| (*x as u32).to_le_bytes())
                    .collect(),
            ),
            T(
                "u64",
                D::U64,
                vec![4, 6],
                ints.iter()
                    .flat_map(|x| (*x as u64).to_le_bytes())
                    .collect(),
            ),
            T(
                "bool",
                D::BOOL,
                vec![4, 6],
                ints.iter().map(|x| (x % 2 == 0) as u8).collect(),
            ),
        ]
    };
    let a = save(dir.path(), "a.safetensors", &make(false));
    let same = save(dir.path(), "same.safetensors", &make(false));
    let bumped = save(dir.path(), "b.safetensors", &make(true));
    let r = run(&a, &same, Tolerance::default());
    assert_eq!(r.verdict, Verdict::Match);
    assert_eq!(r.counts.tensors_compared, 13);
    assert_eq!(r.counts.elements_compared, 13 * 24);
    assert!(r.tensors.iter().all(|t| t.metrics.bit_exact));
    let r = run(&a, &bumped, Tolerance::default());
    for t in &r.tensors {
        assert!(!t.passed, "{} must fail", t.name);
        if t.name != "bool" {
            assert_eq!(
                t.metrics.max_abs_index,
                Some(vec![2, 1]),
                "{}: element 13 of [4, 6]",
                t.name
            );
        }
        let gate = if t.name.starts_with('f') || t.name == "bf16" {
            "allclose"
        } else {
            "bit_exact"
        };
        assert_eq!(t.failures[0].metric, gate, "{}", t.name);
    }
}

#[test]
fn structural_problems_are_fatal_and_say_where() {
    let dir = tempfile::tempdir().unwrap();
    let a = save(
        dir.path(),
        "a.safetensors",
        &[
            T("kept", D::F32, vec![2], f32s(&[1.0, 2.0])),
            T("gone", D::F32, vec![2], f32s(&[1.0, 2.0])),
            T("reshaped", D::F32, vec![2, 2], f32s(&[1.0; 4])),
            T("retyped", D::F32, vec![2], f32s(&[1.0, 2.0])),
            T("nan", D::F32, vec![2, 3], f32s(&[1.0; 6])),
            T("inf_ref", D::F32, vec![2], f32s(&[f32::INFINITY, 1.0])),
            T("zeroed", D::F32, vec![3], f32s(&[0.0, 1.0, 2.0])),
        ],
    );
    let b = save(
        dir.path(),
        "b.safetensors",
        &[
            T("kept", D::F32, vec![2], f32s(&[1.0, 2.0])),
            T("reshaped", D::F32, vec![4], f32s(&[1.0; 4])),
            T("retyped", D::F64, vec![2], f64s(&[1.0, 2.0])),
            T(
                "nan",
                D::F32,
                vec![2, 3],
                f32s(&[1.0, 1.0, 1.0, 1.0, f32::NAN, f32::NAN]),
            ),
            T("inf_ref", D::F32, vec![2], f32s(&[1.0, 1.0])),
            T("zeroed", D::F32, vec![3], f32s(&[0.0; 3])),
            T("new", D::F32, vec![1], f32s(&[1.0])),
        ],
    );
    let r = run(&a, &b, Tolerance::default());
    assert_eq!(r.verdict, Verdict::Mismatch);
    assert_eq!(
        kinds(&r),
        [
            ProblemKind::Missing,
            ProblemKind::ShapeMismatch,
            ProblemKind::DtypeMismatch,
            ProblemKind::Extra,
            ProblemKind::NonFinite,
            ProblemKind::NonFinite,
            ProblemKind::AllZero
        ]
    );
    let text: Vec<&str> = r.problems.iter().map(|p| p.message.as_str()).collect();
    assert!(
        text.contains(&"`nan`: 2 NaN/Inf element(s) in the candidate, first at [1, 1]"),
        "{text:?}"
    );
    assert!(
        text.contains(&"`inf_ref`: 1 NaN/Inf element(s) in the reference, first at [0]"),
        "{text:?}"
    );
    assert!(
        text.contains(
            &"`zeroed`: the candidate is all zeros where the reference has 2 non-zero element(s)"
        ),
        "{text:?}"
    );
    assert!(
        text.contains(&"`reshaped`: shape [2, 2] in the reference, [4] in the candidate"),
        "{text:?}"
    );
    assert_eq!(
        r.counts.tensors_compared, 4,
        "kept, nan, inf_ref and zeroed were still compared"
    );
}

#[test]
fn comparing_nothing_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let a = save(
        dir.path(),
        "a.safetensors",
        &[T("x", D::F32, vec![1], f32s(&[1.0]))],
    );
    let b = save(
        dir.path(),
        "b.safetensors",
        &[T("y", D::F32, vec![1], f32s(&[1.0]))],
    );
    let err = compare_checkpoints(&a, &b, &TensorOptions::default()).unwrap_err();
    assert!(matches!(err, InputError::NothingCompared(_)), "{err}");
}

#[test]
fn sharded_checkpoints_compare_like_single_files() {
    let dir = tempfile::tempdir().unwrap();
    let (w1, w2, w3) = (values(64, 1), values(32, 2), values(8, 3));
    let single = save(
        dir.path(),
        "single.safetensors",
        &[
            T("a.weight", D::F32, vec![8, 8], f32s(&w1)),
            T("b.weight", D::F32, vec![32], f32s(&w2)),
            T("c.bias", D::F32, vec![8], f32s(&w3)),
        ],
    );
    let shards = dir.path().join("sharded");
    std::fs::create_dir(&shards).unwrap();
    save(
        &shards,
        "model-00001-of-00002.safetensors",
        &[T("a.weight", D::F32, vec![8, 8], f32s(&w1))],
    );
    save(
        &shards,
        "model-00002-of-00002.safetensors",
        &[
            T("b.weight", D::F32, vec![32], f32s(&w2)),
            T("c.bias", D::F32, vec![8], f32s(&w3)),
        ],
    );
    let index = shards.join("model.safetensors.index.json");
    std::fs::write(
        &index,
        r#"{"metadata": {"total_size": 416}, "weight_map": {
            "a.weight": "model-00001-of-00002.safetensors",
            "b.weight": "model-00002-of-00002.safetensors",
            "c.bias": "model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
    for candidate in [&index, &shards] {
        let r = run(&single, candidate, Tolerance::default());
        assert_eq!(r.verdict, Verdict::Match, "{}", candidate.display());
        assert_eq!(r.counts.tensors_compared, 3);
    }
    // An index that names a tensor its shard does not hold is a broken checkpoint.
    std::fs::write(
        &index,
        r#"{"weight_map": {"a.weight": "model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
    let err = compare_checkpoints(&single, &index, &TensorOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("weight_map puts `a.weight` in `model-00002-of-00002.safetensors`"),
        "{err}"
    );
    std::fs::write(
        &index,
        r#"{"weight_map": {"a.weight": "model-00001-of-00002.safetensors"}}"#,
    )
    .unwrap();
    let r = compare_checkpoints(&single, &index, &TensorOptions::default()).unwrap();
    assert_eq!(
        kinds(&r),
        [ProblemKind::Missing, ProblemKind::Missing],
        "b.weight, c.bias"
    );
}

#[test]
fn logits_gate_on_top1_and_cosine_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let mut logits = values(4 * 16, 5);
    let a = save(
        dir.path(),
        "a.safetensors",
        &[T("logits", D::BF16, vec![4, 16], bf16s(&logits))],
    );
    // Tiny noise keeps every argmax and cosine ≈ 1. (The built-in forward-bf16 profile gates
    // relative L2 only: top-1 flips at near-ties on round-off.)
    let noisy: Vec<f32> = logits.iter().map(|x| x * 1.001).collect();
    let b = save(
        dir.path(),
        "b.safetensors",
        &[T("logits", D::BF16, vec![4, 16], bf16s(&noisy))],
    );
    let tol = || Tolerance {
        profile: Profile::parse("forward-bf16").unwrap(),
        settings: parse_settings("cosine=0.9999,top1=1").unwrap(),
        ..Tolerance::default()
    };
    let r = run(&a, &b, tol());
    assert_eq!(r.verdict, Verdict::Match, "{:?}", r.tensors[0].failures);
    assert_eq!(r.tensors[0].metrics.logits.unwrap().top1, 1.0);
    // Flip the argmax of row 2.
    let row = &mut logits[32..48];
    let (imax, _) = row
        .iter()
        .enumerate()
        .fold((0, f32::MIN), |m, (i, &x)| if x > m.1 { (i, x) } else { m });
    row[(imax + 1) % 16] = 5.0;
    let c = save(
        dir.path(),
        "c.safetensors",
        &[T("logits", D::BF16, vec![4, 16], bf16s(&logits))],
    );
    let r = run(&a, &c, tol());
    let t = &r.tensors[0];
    assert_eq!(t.metrics.logits.unwrap().top1, 0.75);
    assert!(
        t.failures
            .iter()
            .any(|f| f.metric == "top1" && f.value == 0.75),
        "{:?}",
        t.failures
    );
    assert!(
        t.failures.iter().any(|f| f.metric == "cosine"),
        "{:?}",
        t.failures
    );
}

#[test]
fn routing_sets_gate_on_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let a = save(
        dir.path(),
        "a.safetensors",
        &[T(
            "layers.0.moe.routing",
            D::I64,
            vec![3, 2],
            i64s(&[0, 1, 2, 3, 1, 3]),
        )],
    );
    let reordered = save(
        dir.path(),
        "b.safetensors",
        &[T(
            "layers.0.moe.routing",
            D::I64,
            vec![3, 2],
            i64s(&[1, 0, 3, 2, 3, 1]),
        )],
    );
    let changed = save(
        dir.path(),
        "c.safetensors",
        &[T(
            "layers.0.moe.routing",
            D::I64,
            vec![3, 2],
            i64s(&[0, 1, 2, 0, 1, 3]),
        )],
    );
    let tol = || Tolerance {
        profile: Profile::parse("routing-f32").unwrap(),
        ..Tolerance::default()
    };
    // Same sets in another order: routing agrees, though the raw ids differ.
    let r = run(&a, &reordered, tol());
    assert_eq!(r.tensors[0].metrics.routing.unwrap().overlap, 1.0);
    assert!(r.tensors[0].failures.iter().all(|f| f.metric != "mismatch"));
    let r = run(&a, &changed, tol());
    let routing = r.tensors[0].metrics.routing.unwrap();
    assert!((routing.overlap - (1.0 + 0.5 + 1.0) / 3.0).abs() < 1e-12);
    // One token of three routed differently: over R3's 1e-2 mismatch.
    assert!(r.tensors[0].failures.iter().any(|f| f.metric == "mismatch"));
}

#[test]
fn layer_averaging_gates_on_layer_means_and_overrides_apply_by_glob() {
    let dir = tempfile::tempdir().unwrap();
    let base = values(100, 9);
    // layers.0.a is off by 2% in relative L2, layers.0.b is exact: the layer mean is 1%.
    let off: Vec<f32> = base.iter().map(|x| x * 1.02).collect();
    let a = save(
        dir.path(),
        "a.safetensors",
        &[
            T("layers.0.a", D::F32, vec![100], f32s(&base)),
            T("layers.0.b", D::F32, vec![100], f32s(&base)),
        ],
    );
    let b = save(
        dir.path(),
        "b.safetensors",
        &[
            T("layers.0.a", D::F32, vec![100], f32s(&off)),
            T("layers.0.b", D::F32, vec![100], f32s(&base)),
        ],
    );
    let tol = |layer_average| Tolerance {
        settings: parse_settings("relative_l2=0.015,rtol=1,atol=1").unwrap(),
        layer_average: Some(layer_average),
        ..Tolerance::default()
    };
    let per_tensor = run(&a, &b, tol(false));
    assert_eq!(per_tensor.counts.tensors_failed, 1);
    let averaged = run(&a, &b, tol(true));
    assert_eq!(averaged.verdict, Verdict::Match);
    assert_eq!(averaged.layers.len(), 1);
    let mean = averaged.layers[0].means[0].1;
    assert!((mean - 0.01).abs() < 1e-6, "{mean}");
    // A per-tensor override loosens one tensor only.
    let loosened = Tolerance {
        overrides: vec![parse_override("layers.*.a:relative_l2=0.05").unwrap()],
        ..tol(false)
    };
    assert_eq!(run(&a, &b, loosened).verdict, Verdict::Match);
}

#[test]
fn malformed_files_name_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let good = save(
        dir.path(),
        "good.safetensors",
        &[T("w", D::F32, vec![64], f32s(&values(64, 4)))],
    );
    let bytes = std::fs::read(&good).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated.safetensors",
            bytes[..bytes.len() - 10].to_vec(),
            "run past the data section",
        ),
        (
            "tiny.safetensors",
            bytes[..5].to_vec(),
            "truncated: 5 bytes",
        ),
        (
            "header.safetensors",
            {
                let mut b = bytes.clone();
                b[9] = b'!';
                b
            },
            "bad header JSON",
        ),
        (
            "offsets.safetensors",
            {
                let text = String::from_utf8_lossy(&bytes).replace("[0,256]", "[0,252]");
                text.into_bytes()
            },
            "needs 256 bytes but data_offsets [0, 252] hold 252",
        ),
    ];
    for (name, content, want) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let err = compare_checkpoints(&good, &path, &TensorOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(name) && err.contains(want), "{name}: {err}");
    }
    let err = compare_checkpoints(
        &good,
        &dir.path().join("absent.safetensors"),
        &TensorOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("absent.safetensors"));
}

#[test]
fn large_tensors_are_split_into_chunks_without_changing_results() {
    let dir = tempfile::tempdir().unwrap();
    // 600k elements: three scan chunks; the worst element sits in the last one.
    let base = values(600_000, 11);
    let mut cand = base.clone();
    cand[599_999] += 0.5;
    cand[10] += 0.25;
    let a = save(
        dir.path(),
        "a.safetensors",
        &[T("big", D::F32, vec![600, 1000], f32s(&base))],
    );
    let b = save(
        dir.path(),
        "b.safetensors",
        &[T("big", D::F32, vec![600, 1000], f32s(&cand))],
    );
    let r = run(&a, &b, Tolerance::default());
    let m = &r.tensors[0].metrics;
    assert_eq!(m.elements, 600_000);
    assert_eq!(m.allclose.mismatched, 2);
    assert_eq!(m.max_abs_index, Some(vec![599, 999]));
    assert_eq!(m.bit_mismatched, 2);
}
