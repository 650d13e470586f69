//! The one-pass kernel: every elementwise metric of a pair of tensors (or a chunk of one) in a
//! single sweep over both buffers, accumulating in f64.
//!
//! Chunks are scanned in parallel and merged with [`Stats::merge`]; maxima keep the lowest
//! index on ties so results do not depend on how the work was split.

use half::{bf16, f16};

use crate::dtype::TensorDtype;

/// "No index" marker for first/worst positions.
pub const NONE: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub n: u64,
    pub nonfinite_ref: u64,
    pub first_nonfinite_ref: u64,
    pub nonfinite_cand: u64,
    pub first_nonfinite_cand: u64,
    pub nonzero_ref: u64,
    pub nonzero_cand: u64,
    pub bit_diff: u64,
    pub first_bit_diff: u64,
    pub max_ulp: u64,
    pub max_abs: f64,
    pub max_abs_at: u64,
    pub max_rel: f64,
    pub max_rel_at: u64,
    pub sum_abs_diff: f64,
    pub sum_abs_ref: f64,
    pub sum_sq_diff: f64,
    pub sum_sq_ref: f64,
    pub sum_sq_cand: f64,
    pub dot: f64,
    pub mismatched: u64,
    pub worst_excess: f64,
    pub worst_at: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            n: 0,
            nonfinite_ref: 0,
            first_nonfinite_ref: NONE,
            nonfinite_cand: 0,
            first_nonfinite_cand: NONE,
            nonzero_ref: 0,
            nonzero_cand: 0,
            bit_diff: 0,
            first_bit_diff: NONE,
            max_ulp: 0,
            max_abs: 0.0,
            max_abs_at: NONE,
            max_rel: 0.0,
            max_rel_at: NONE,
            sum_abs_diff: 0.0,
            sum_abs_ref: 0.0,
            sum_sq_diff: 0.0,
            sum_sq_ref: 0.0,
            sum_sq_cand: 0.0,
            dot: 0.0,
            mismatched: 0,
            worst_excess: 0.0,
            worst_at: NONE,
        }
    }
}

fn max_at(v: &mut f64, at: &mut u64, ov: f64, oat: u64) {
    if ov > *v || (ov == *v && oat < *at) {
        *v = ov;
        *at = oat;
    }
}

impl Stats {
    /// Combine the stats of two disjoint chunks.
    pub fn merge(&mut self, o: &Stats) {
        self.n += o.n;
        self.nonfinite_ref += o.nonfinite_ref;
        self.first_nonfinite_ref = self.first_nonfinite_ref.min(o.first_nonfinite_ref);
        self.nonfinite_cand += o.nonfinite_cand;
        self.first_nonfinite_cand = self.first_nonfinite_cand.min(o.first_nonfinite_cand);
        self.nonzero_ref += o.nonzero_ref;
        self.nonzero_cand += o.nonzero_cand;
        self.bit_diff += o.bit_diff;
        self.first_bit_diff = self.first_bit_diff.min(o.first_bit_diff);
        self.max_ulp = self.max_ulp.max(o.max_ulp);
        max_at(
            &mut self.max_abs,
            &mut self.max_abs_at,
            o.max_abs,
            o.max_abs_at,
        );
        max_at(
            &mut self.max_rel,
            &mut self.max_rel_at,
            o.max_rel,
            o.max_rel_at,
        );
        self.sum_abs_diff += o.sum_abs_diff;
        self.sum_abs_ref += o.sum_abs_ref;
        self.sum_sq_diff += o.sum_sq_diff;
        self.sum_sq_ref += o.sum_sq_ref;
        self.sum_sq_cand += o.sum_sq_cand;
        self.dot += o.dot;
        self.mismatched += o.mismatched;
        max_at(
            &mut self.worst_excess,
            &mut self.worst_at,
            o.worst_excess,
            o.worst_at,
        );
    }
}

/// How one dtype's elements are read: value as f64, raw bits, and the bits mapped to a
/// monotonic integer line (for ULP distance).
trait Element {
    const SIZE: usize;
    fn load(b: &[u8]) -> (f64, u64);
    fn ordinal(bits: u64) -> i128;
}

/// IEEE floats: flip negative numbers so that integer order follows float order.
fn float_ordinal(bits: u64, width: u32) -> i128 {
    let sign = 1u64 << (width - 1);
    if bits & sign != 0 {
        -((bits & (sign - 1)) as i128)
    } else {
        bits as i128
    }
}

macro_rules! float_elem {
    ($name:ident, $size:expr, $width:expr, $load:expr) => {
        struct $name;
        impl Element for $name {
            const SIZE: usize = $size;
            #[inline(always)]
            fn load(b: &[u8]) -> (f64, u64) {
                $load(b)
            }
            #[inline(always)]
            fn ordinal(bits: u64) -> i128 {
                float_ordinal(bits, $width)
            }
        }
    };
}

float_elem!(F64, 8, 64, |b: &[u8]| {
    let bits = u64::from_le_bytes(b[..8].try_into().unwrap());
    (f64::from_bits(bits), bits)
});
float_elem!(F32, 4, 32, |b: &[u8]| {
    let bits = u32::from_le_bytes(b[..4].try_into().unwrap());
    (f32::from_bits(bits) as f64, bits as u64)
});
float_elem!(F16, 2, 16, |b: &[u8]| {
    let bits = u16::from_le_bytes(b[..2].try_into().unwrap());
    (f16::from_bits(bits).to_f64(), bits as u64)
});
float_elem!(BF16, 2, 16, |b: &[u8]| {
    let bits = u16::from_le_bytes(b[..2].try_into().unwrap());
    (bf16::from_bits(bits).to_f64(), bits as u64)
});

macro_rules! int_elem {
    ($name:ident, $ty:ty, $size:expr) => {
        struct $name;
        impl Element for $name {
            const SIZE: usize = $size;
            #[inline(always)]
            fn load(b: &[u8]) -> (f64, u64) {
                let v = <$ty>::from_le_bytes(b[..$size].try_into().unwrap());
                (v as f64, v as u64)
            }
            #[inline(always)]
            fn ordinal(bits: u64) -> i128 {
                (bits as $ty) as i128
            }
        }
    };
}

int_elem!(I64, i64, 8);
int_elem!(I32, i32, 4);
int_elem!(I16, i16, 2);
int_elem!(I8, i8, 1);
int_elem!(U64, u64, 8);
int_elem!(U32, u32, 4);
int_elem!(U16, u16, 2);
int_elem!(U8, u8, 1);

/// Scan `reference` against `candidate` (same dtype, same length), element indices starting at
/// `offset`, with allclose at (atol, rtol): |c − r| ≤ atol + rtol·|r|.
pub fn scan(
    dtype: TensorDtype,
    reference: &[u8],
    candidate: &[u8],
    offset: u64,
    atol: f64,
    rtol: f64,
) -> Stats {
    match dtype {
        TensorDtype::F64 => run::<F64>(reference, candidate, offset, atol, rtol),
        TensorDtype::F32 => run::<F32>(reference, candidate, offset, atol, rtol),
        TensorDtype::F16 => run::<F16>(reference, candidate, offset, atol, rtol),
        TensorDtype::BF16 => run::<BF16>(reference, candidate, offset, atol, rtol),
        TensorDtype::I64 => run::<I64>(reference, candidate, offset, atol, rtol),
        TensorDtype::I32 => run::<I32>(reference, candidate, offset, atol, rtol),
        TensorDtype::I16 => run::<I16>(reference, candidate, offset, atol, rtol),
        TensorDtype::I8 => run::<I8>(reference, candidate, offset, atol, rtol),
        TensorDtype::U64 => run::<U64>(reference, candidate, offset, atol, rtol),
        TensorDtype::U32 => run::<U32>(reference, candidate, offset, atol, rtol),
        TensorDtype::U16 => run::<U16>(reference, candidate, offset, atol, rtol),
        TensorDtype::U8 | TensorDtype::BOOL => run::<U8>(reference, candidate, offset, atol, rtol),
    }
}

#[inline(always)]
fn run<E: Element>(a: &[u8], b: &[u8], offset: u64, atol: f64, rtol: f64) -> Stats {
    let mut s = Stats::default();
    let n = a.len() / E::SIZE;
    s.n = n as u64;
    for (i, (ea, eb)) in a
        .chunks_exact(E::SIZE)
        .zip(b.chunks_exact(E::SIZE))
        .enumerate()
    {
        let at = offset + i as u64;
        let (x, xb) = E::load(ea);
        let (y, yb) = E::load(eb);
        if xb != yb {
            if s.bit_diff == 0 {
                s.first_bit_diff = at;
            }
            s.bit_diff += 1;
            let ulp = (E::ordinal(xb) - E::ordinal(yb)).unsigned_abs();
            s.max_ulp = s.max_ulp.max(ulp.min(u64::MAX as u128) as u64);
        }
        let (fx, fy) = (x.is_finite(), y.is_finite());
        if !fx || !fy {
            if !fx {
                if s.nonfinite_ref == 0 {
                    s.first_nonfinite_ref = at;
                }
                s.nonfinite_ref += 1;
            }
            if !fy {
                if s.nonfinite_cand == 0 {
                    s.first_nonfinite_cand = at;
                }
                s.nonfinite_cand += 1;
            }
            continue;
        }
        s.nonzero_ref += (x != 0.0) as u64;
        s.nonzero_cand += (y != 0.0) as u64;
        let d = y - x;
        let ad = d.abs();
        let ax = x.abs();
        if ad > s.max_abs {
            s.max_abs = ad;
            s.max_abs_at = at;
        }
        if ax > 0.0 {
            let r = ad / ax;
            if r > s.max_rel {
                s.max_rel = r;
                s.max_rel_at = at;
            }
        }
        s.sum_abs_diff += ad;
        s.sum_abs_ref += ax;
        s.sum_sq_diff += d * d;
        s.sum_sq_ref += x * x;
        s.sum_sq_cand += y * y;
        s.dot += x * y;
        let limit = atol + rtol * ax;
        if ad > limit {
            s.mismatched += 1;
            let excess = if limit > 0.0 {
                ad / limit
            } else {
                f64::INFINITY
            };
            if excess > s.worst_excess {
                s.worst_excess = excess;
                s.worst_at = at;
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
