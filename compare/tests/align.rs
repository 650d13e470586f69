//! Lining checkpoints up before comparing: `--rename` and `--cast`.

mod common;

use common::*;
use meshparity_compare::{compare_checkpoints, TensorDtype as D, TensorOptions, Verdict};

/// A candidate saved in another dtype and under a wrapper's prefix: without options every
/// tensor is a listed structural problem; `--rename model.=` and `--cast f32` line them up and
/// the comparison gates at the coarser dtype's limits.
#[test]
fn rename_and_cast_line_up_a_prefixed_bf16_candidate() {
    let dir = tempfile::tempdir().unwrap();
    let v = values(24, 3);
    let a = save(
        dir.path(),
        "a.safetensors",
        &[
            T("layers.0.w", D::F32, vec![4, 6], f32s(&v)),
            T("norm", D::F32, vec![4, 6], f32s(&v)),
        ],
    );
    let b = save(
        dir.path(),
        "b.safetensors",
        &[
            T("model.layers.0.w", D::BF16, vec![4, 6], bf16s(&v)),
            T("model.norm", D::BF16, vec![4, 6], bf16s(&v)),
        ],
    );
    let plain = TensorOptions::default();
    let err = compare_checkpoints(&a, &b, &plain).unwrap_err().to_string();
    assert!(
        err.contains("`layers.0.w` is missing") && err.contains("model.norm"),
        "{err}"
    );
    let renamed = TensorOptions {
        rename: vec![meshparity_compare::Rename::parse("model.=").unwrap()],
        ..TensorOptions::default()
    };
    let err = compare_checkpoints(&a, &b, &renamed)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("dtype F32 in the reference, BF16 in the candidate"),
        "{err}"
    );
    let cast = TensorOptions {
        cast: Some(D::F32),
        ..renamed
    };
    let r = compare_checkpoints(&a, &b, &cast).unwrap();
    assert_eq!(r.verdict, Verdict::Match, "{:?}", r.problems);
    assert_eq!(r.counts.tensors_compared, 2);
    assert!(
        r.notes.iter().any(|n| n.contains("--cast")),
        "{:?}",
        r.notes
    );
    // The coarser dtype's limits: bf16 round-off passes, a real change does not.
    let mut off = v.clone();
    off[5] += 0.5;
    let c = save(
        dir.path(),
        "c.safetensors",
        &[
            T("model.layers.0.w", D::BF16, vec![4, 6], bf16s(&off)),
            T("model.norm", D::BF16, vec![4, 6], bf16s(&v)),
        ],
    );
    let r = compare_checkpoints(&a, &c, &cast).unwrap();
    assert_eq!(r.verdict, Verdict::Mismatch);
}
