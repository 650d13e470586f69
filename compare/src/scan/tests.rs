//! The kernel against hand-computed values and against its own scalar definition.

use super::element::F32;
use super::scalar::scalar;
use super::*;
use crate::dtype::TensorDtype;

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn hand_computed_metrics() {
    // ref [1, -2, 4, 0], cand [1, -2.5, 4, 0.5]: diffs [0, -0.5, 0, 0.5].
    let s = scan(
        TensorDtype::F32,
        &f32s(&[1.0, -2.0, 4.0, 0.0]),
        &f32s(&[1.0, -2.5, 4.0, 0.5]),
        0,
        0.1,
        0.1,
    );
    assert_eq!(s.n, 4);
    assert_eq!(s.bit_diff, 2);
    assert_eq!(s.first_bit_diff, 1);
    assert_eq!(
        (s.max_abs, s.max_abs_at),
        (0.5, 1),
        "ties keep the first index"
    );
    assert_eq!(
        (s.max_rel, s.max_rel_at),
        (0.25, 1),
        "0.5/2; the zero reference has no relative error"
    );
    assert_eq!(s.sum_abs_diff, 1.0);
    assert_eq!(s.sum_abs_ref, 7.0);
    assert_eq!(s.sum_sq_diff, 0.5);
    assert_eq!(s.sum_sq_ref, 21.0);
    assert_eq!(s.sum_sq_cand, 1.0 + 6.25 + 16.0 + 0.25);
    assert_eq!(s.dot, 1.0 + 5.0 + 16.0);
    // allclose limits: 0.1 + 0.1·|r| = [0.2, 0.3, 0.5, 0.1]; both diffs exceed theirs.
    assert_eq!(s.mismatched, 2);
    assert_eq!(s.worst_at, 3, "0.5/0.1 = 5 beats 0.5/0.3");
    assert_eq!((s.nonzero_ref, s.nonzero_cand), (3, 4));
}

#[test]
fn ulp_distance_crosses_zero() {
    let s = scan(
        TensorDtype::F32,
        &f32s(&[f32::from_bits(1)]),
        &f32s(&[-f32::from_bits(1)]),
        0,
        0.0,
        0.0,
    );
    assert_eq!(s.max_ulp, 2);
    let s = scan(
        TensorDtype::F32,
        &f32s(&[1.0]),
        &f32s(&[f32::from_bits(1.0f32.to_bits() + 3)]),
        0,
        0.0,
        0.0,
    );
    assert_eq!(s.max_ulp, 3);
}

#[test]
fn nonfinite_elements_are_counted_and_excluded() {
    let s = scan(
        TensorDtype::F32,
        &f32s(&[1.0, 2.0, f32::INFINITY]),
        &f32s(&[f32::NAN, 2.0, 3.0]),
        10,
        0.0,
        0.0,
    );
    assert_eq!((s.nonfinite_cand, s.first_nonfinite_cand), (1, 10));
    assert_eq!((s.nonfinite_ref, s.first_nonfinite_ref), (1, 12));
    assert_eq!(s.sum_sq_ref, 4.0, "only the finite pair is summed");
}

#[test]
fn blocked_kernel_agrees_with_the_element_by_element_one() {
    let mut rng = fastrand::Rng::with_seed(7);
    for n in [1usize, 3, 255, 256, 257, 1000, 4099] {
        let a: Vec<f32> = (0..n)
            .map(|_| {
                if rng.u8(..) == 0 {
                    0.0
                } else {
                    rng.f32() - 0.5
                }
            })
            .collect();
        let mut b: Vec<f32> = a
            .iter()
            .map(|x| {
                if rng.bool() {
                    *x
                } else {
                    x + (rng.f32() - 0.5) * 1e-4
                }
            })
            .collect();
        if n > 500 {
            b[400] = f32::NAN;
        }
        let (ab, bb) = (f32s(&a), f32s(&b));
        let fast = scan(TensorDtype::F32, &ab, &bb, 5, 1e-5, 1e-3);
        let slow = scalar::<F32>(&ab, &bb, 5, 1e-5, 1e-3);
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * x.abs().max(y.abs()).max(1e-300);
        assert_eq!(
            (fast.n, fast.bit_diff, fast.first_bit_diff, fast.max_ulp),
            (slow.n, slow.bit_diff, slow.first_bit_diff, slow.max_ulp),
            "n={n}"
        );
        assert_eq!(
            (fast.max_abs, fast.max_abs_at, fast.max_rel, fast.max_rel_at),
            (slow.max_abs, slow.max_abs_at, slow.max_rel, slow.max_rel_at),
            "n={n}"
        );
        assert_eq!(
            (fast.mismatched, fast.worst_excess, fast.worst_at),
            (slow.mismatched, slow.worst_excess, slow.worst_at),
            "n={n}"
        );
        assert_eq!(
            (
                fast.nonfinite_cand,
                fast.first_nonfinite_cand,
                fast.nonzero_ref,
                fast.nonzero_cand
            ),
            (
                slow.nonfinite_cand,
                slow.first_nonfinite_cand,
                slow.nonzero_ref,
                slow.nonzero_cand
            ),
            "n={n}"
        );
        for (x, y) in [
            (fast.sum_abs_diff, slow.sum_abs_diff),
            (fast.sum_sq_diff, slow.sum_sq_diff),
            (fast.sum_sq_ref, slow.sum_sq_ref),
            (fast.dot, slow.dot),
        ] {
            assert!(close(x, y), "n={n}: {x} vs {y}");
        }
    }
}

#[test]
fn vector_ulp_distance_matches_the_scalar_one() {
    let mut rng = fastrand::Rng::with_seed(11);
    let a: Vec<f32> = (0..4096).map(|_| (rng.f32() - 0.5) * 1e3).collect();
    let b: Vec<f32> = a
        .iter()
        .map(|x| match rng.u8(0..4) {
            0 => -x,
            1 => f32::from_bits(x.to_bits() ^ 1),
            2 => x + 1e-3,
            _ => *x,
        })
        .collect();
    let (ab, bb) = (f32s(&a), f32s(&b));
    let fast = scan(TensorDtype::F32, &ab, &bb, 0, 1e-5, 1e-3);
    let slow = scalar::<F32>(&ab, &bb, 0, 1e-5, 1e-3);
    assert_eq!(
        (fast.bit_diff, fast.first_bit_diff, fast.max_ulp),
        (slow.bit_diff, slow.first_bit_diff, slow.max_ulp)
    );
    assert!(
        fast.max_ulp > 1 << 30,
        "sign flips are far apart on the ordinal line"
    );
}

#[test]
fn merge_equals_one_scan() {
    let mut rng = fastrand::Rng::with_seed(3);
    let a: Vec<f32> = (0..1000).map(|_| rng.f32() - 0.5).collect();
    let b: Vec<f32> = a.iter().map(|x| x + (rng.f32() - 0.5) * 1e-3).collect();
    let (ab, bb) = (f32s(&a), f32s(&b));
    let whole = scan(TensorDtype::F32, &ab, &bb, 0, 1e-5, 1e-3);
    let mut parts = Stats::default();
    for (i, (ca, cb)) in ab.chunks(4 * 137).zip(bb.chunks(4 * 137)).enumerate() {
        parts.merge(&scan(
            TensorDtype::F32,
            ca,
            cb,
            (i * 137) as u64,
            1e-5,
            1e-3,
        ));
    }
    assert_eq!(whole.n, parts.n);
    assert_eq!(
        (whole.max_abs, whole.max_abs_at),
        (parts.max_abs, parts.max_abs_at)
    );
    assert_eq!(whole.mismatched, parts.mismatched);
    assert_eq!(whole.worst_at, parts.worst_at);
    assert!((whole.sum_sq_diff - parts.sum_sq_diff).abs() < 1e-15);
}
