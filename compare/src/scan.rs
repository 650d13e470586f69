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
    /// Layout the fused AVX2 kernel reads straight from bytes (f32, f64); `None` otherwise.
    const FUSED: Option<Fused> = None;
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
    ($name:ident, $size:expr, $width:expr, $fused:expr, $load:expr) => {
        struct $name;
        impl Element for $name {
            const SIZE: usize = $size;
            const FUSED: Option<Fused> = $fused;
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fused {
    F32,
    F64,
}

float_elem!(F64, 8, 64, Some(Fused::F64), |b: &[u8]| {
    let bits = u64::from_le_bytes(b[..8].try_into().unwrap());
    (f64::from_bits(bits), bits)
});
float_elem!(F32, 4, 32, Some(Fused::F32), |b: &[u8]| {
    let bits = u32::from_le_bytes(b[..4].try_into().unwrap());
    (f32::from_bits(bits) as f64, bits as u64)
});
float_elem!(F16, 2, 16, None, |b: &[u8]| {
    let bits = u16::from_le_bytes(b[..2].try_into().unwrap());
    (f16::from_bits(bits).to_f64(), bits as u64)
});
float_elem!(BF16, 2, 16, None, |b: &[u8]| {
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
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has the features the function is compiled for (checked above).
            return unsafe { scan_avx2(dtype, reference, candidate, offset, atol, rtol) };
        }
    }
    scan_generic(dtype, reference, candidate, offset, atol, rtol)
}

/// The same kernel compiled for AVX2 + FMA, so its reductions run four f64 lanes wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn scan_avx2(
    dtype: TensorDtype,
    a: &[u8],
    b: &[u8],
    offset: u64,
    atol: f64,
    rtol: f64,
) -> Stats {
    scan_generic(dtype, a, b, offset, atol, rtol)
}

#[inline(always)]
fn scan_generic(
    dtype: TensorDtype,
    a: &[u8],
    b: &[u8],
    offset: u64,
    atol: f64,
    rtol: f64,
) -> Stats {
    match dtype {
        TensorDtype::F64 => blocks::<F64>(a, b, offset, atol, rtol),
        TensorDtype::F32 => blocks::<F32>(a, b, offset, atol, rtol),
        TensorDtype::F16 => blocks::<F16>(a, b, offset, atol, rtol),
        TensorDtype::BF16 => blocks::<BF16>(a, b, offset, atol, rtol),
        TensorDtype::I64 => blocks::<I64>(a, b, offset, atol, rtol),
        TensorDtype::I32 => blocks::<I32>(a, b, offset, atol, rtol),
        TensorDtype::I16 => blocks::<I16>(a, b, offset, atol, rtol),
        TensorDtype::I8 => blocks::<I8>(a, b, offset, atol, rtol),
        TensorDtype::U64 => blocks::<U64>(a, b, offset, atol, rtol),
        TensorDtype::U32 => blocks::<U32>(a, b, offset, atol, rtol),
        TensorDtype::U16 => blocks::<U16>(a, b, offset, atol, rtol),
        TensorDtype::U8 | TensorDtype::BOOL => blocks::<U8>(a, b, offset, atol, rtol),
    }
}

/// Elements per block: decoded into stack arrays, reduced branch-free.
const BLOCK: usize = 256;
/// Independent accumulators per sum, so additions pipeline and vectorize.
const LANES: usize = 4;

/// Branch-free reductions of one block (zero-padded to `BLOCK`). Counts are kept in f64 lanes
/// (exact below 2^53) so that every operation is a plain vector op.
#[derive(Default)]
struct BlockSums {
    /// Σ|d|, Σ|r|, Σd², Σr², Σc², Σr·c.
    sums: [f64; 6],
    nonzero_ref: f64,
    nonzero_cand: f64,
    mismatched: f64,
    max_abs: f64,
    /// Elements whose relative error may beat `max_rel` (revisited exactly).
    rel_hits: f64,
    /// Largest ULP distance in the block, when the kernel computed it (f32 on AVX2).
    max_ulp: Option<u64>,
}

#[inline(always)]
fn reduce(xa: &[f64; BLOCK], xb: &[f64; BLOCK], atol: f64, rtol: f64, max_rel: f64) -> BlockSums {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has the features the function is compiled for (checked above).
            return unsafe { reduce_avx2(xa, xb, atol, rtol, max_rel) };
        }
    }
    reduce_lanes(xa, xb, atol, rtol, max_rel)
}

/// Portable version: four independent lanes per accumulator.
#[inline(always)]
fn reduce_lanes(
    xa: &[f64; BLOCK],
    xb: &[f64; BLOCK],
    atol: f64,
    rtol: f64,
    max_rel: f64,
) -> BlockSums {
    let mut sum = [[0f64; LANES]; 6];
    let mut count = [[0f64; LANES]; 4];
    let mut block_max = [0f64; LANES];
    for (ca, cb) in xa.chunks_exact(LANES).zip(xb.chunks_exact(LANES)) {
        for l in 0..LANES {
            let (x, y) = (ca[l], cb[l]);
            let d = y - x;
            let (ad, ax) = (d.abs(), x.abs());
            sum[0][l] += ad;
            sum[1][l] += ax;
            sum[2][l] += d * d;
            sum[3][l] += x * x;
            sum[4][l] += y * y;
            sum[5][l] += x * y;
            count[0][l] += f64::from(u8::from(x != 0.0));
            count[1][l] += f64::from(u8::from(y != 0.0));
            count[2][l] += f64::from(u8::from(ad > atol + rtol * ax));
            count[3][l] += f64::from(u8::from((ax > 0.0) & (ad > max_rel * ax)));
            block_max[l] = if ad > block_max[l] { ad } else { block_max[l] };
        }
    }
    let total = |v: &[f64; LANES]| v.iter().sum::<f64>();
    BlockSums {
        sums: [
            total(&sum[0]),
            total(&sum[1]),
            total(&sum[2]),
            total(&sum[3]),
            total(&sum[4]),
            total(&sum[5]),
        ],
        nonzero_ref: total(&count[0]),
        nonzero_cand: total(&count[1]),
        mismatched: total(&count[2]),
        rel_hits: total(&count[3]),
        max_abs: block_max.iter().copied().fold(0.0, f64::max),
        max_ulp: None,
    }
}

/// The blocked kernel. Per block of `BLOCK` elements: branch-free reductions (sums, counts,
/// maxima without indices), read straight from the bytes for f32/f64 on AVX2 machines, else
/// from a decoded f64 copy. A block is revisited element by element only for what reductions
/// cannot tell (see [`finish_block`]), and a block holding NaN/Inf goes to [`scalar`] whole.
/// Parity data rarely needs either, so the common path costs a few vector instructions per
/// element.
#[inline(always)]
fn blocks<E: Element>(a: &[u8], b: &[u8], offset: u64, atol: f64, rtol: f64) -> Stats {
    let mut s = Stats::default();
    let n = (a.len() / E::SIZE).min(b.len() / E::SIZE);
    let mut xa = [0f64; BLOCK];
    let mut xb = [0f64; BLOCK];
    let mut lo = 0;
    while lo < n {
        let len = (n - lo).min(BLOCK);
        let bytes = lo * E::SIZE..(lo + len) * E::SIZE;
        let (ba, bb) = (&a[bytes.clone()], &b[bytes]);
        let at = offset + lo as u64;
        lo += len;
        if let Some((r, differ)) = fused::<E>(ba, bb, len, atol, rtol, s.max_rel) {
            // A NaN or Inf anywhere makes Σ|r| or Σc² non-finite (so does overflow, which the
            // scalar path then handles just as exactly).
            if r.sums[1].is_finite() && r.sums[4].is_finite() {
                finish_block::<E>(&mut s, r, differ, ba, bb, at, atol, rtol);
            } else {
                s.merge(&scalar::<E>(ba, bb, at, atol, rtol));
            }
            continue;
        }
        let mut differ = 0u64;
        for ((da, db), (ea, eb)) in xa
            .iter_mut()
            .zip(xb.iter_mut())
            .zip(ba.chunks_exact(E::SIZE).zip(bb.chunks_exact(E::SIZE)))
        {
            let (x, xbits) = E::load(ea);
            let (y, ybits) = E::load(eb);
            *da = x;
            *db = y;
            differ += u64::from(xbits != ybits);
        }
        // Zeros pad a short block: they add nothing to any sum, count or maximum.
        xa[len..].fill(0.0);
        xb[len..].fill(0.0);
        let finite = xa
            .iter()
            .zip(&xb)
            .fold(true, |ok, (x, y)| ok & x.is_finite() & y.is_finite());
        if !finite {
            s.merge(&scalar::<E>(ba, bb, at, atol, rtol));
            continue;
        }
        let r = reduce(&xa, &xb, atol, rtol, s.max_rel);
        finish_block::<E>(&mut s, r, differ, ba, bb, at, atol, rtol);
    }
    s
}

/// Fold a block's reductions into `s`, then revisit the block element by element only for what
/// the reductions cannot say: where bits differ (first index, ULPs), and the index of a new
/// maximum or of the worst allclose excess.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn finish_block<E: Element>(
    s: &mut Stats,
    r: BlockSums,
    bit_diff: u64,
    ba: &[u8],
    bb: &[u8],
    at: u64,
    atol: f64,
    rtol: f64,
) {
    s.n += (ba.len() / E::SIZE) as u64;
    s.sum_abs_diff += r.sums[0];
    s.sum_abs_ref += r.sums[1];
    s.sum_sq_diff += r.sums[2];
    s.sum_sq_ref += r.sums[3];
    s.sum_sq_cand += r.sums[4];
    s.dot += r.sums[5];
    s.nonzero_ref += r.nonzero_ref as u64;
    s.nonzero_cand += r.nonzero_cand as u64;
    s.mismatched += r.mismatched as u64;
    let pairs = || {
        ba.chunks_exact(E::SIZE)
            .zip(bb.chunks_exact(E::SIZE))
            .enumerate()
    };
    if let (Some(ulp), true) = (r.max_ulp, s.bit_diff > 0) {
        // The kernel measured ULPs and the first differing index is already known.
        s.bit_diff += bit_diff;
        s.max_ulp = s.max_ulp.max(ulp);
    } else if bit_diff > 0 {
        for (i, (ea, eb)) in pairs() {
            let (xbits, ybits) = (E::load(ea).1, E::load(eb).1);
            if xbits != ybits {
                if s.bit_diff == 0 {
                    s.first_bit_diff = at + i as u64;
                }
                s.bit_diff += 1;
                let ulp = (E::ordinal(xbits) - E::ordinal(ybits)).unsigned_abs();
                s.max_ulp = s.max_ulp.max(ulp.min(u64::MAX as u128) as u64);
            }
        }
    }
    if r.max_abs > s.max_abs || r.rel_hits > 0.0 || r.mismatched > 0.0 {
        for (i, (ea, eb)) in pairs() {
            let (x, y) = (E::load(ea).0, E::load(eb).0);
            let (ad, ax) = ((y - x).abs(), x.abs());
            if ad > s.max_abs {
                s.max_abs = ad;
                s.max_abs_at = at + i as u64;
            }
            if ax > 0.0 && ad > s.max_rel * ax {
                let q = ad / ax;
                if q > s.max_rel {
                    s.max_rel = q;
                    s.max_rel_at = at + i as u64;
                }
            }
            let limit = atol + rtol * ax;
            if ad > limit {
                let excess = if limit > 0.0 {
                    ad / limit
                } else {
                    f64::INFINITY
                };
                if excess > s.worst_excess {
                    s.worst_excess = excess;
                    s.worst_at = at + i as u64;
                }
            }
        }
    }
}

/// The fused kernel for full f32/f64 blocks on AVX2 machines: reads the bytes directly.
#[inline(always)]
fn fused<E: Element>(
    ba: &[u8],
    bb: &[u8],
    len: usize,
    atol: f64,
    rtol: f64,
    max_rel: f64,
) -> Option<(BlockSums, u64)> {
    #[cfg(target_arch = "x86_64")]
    {
        if len == BLOCK
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
        {
            // SAFETY: features checked above; both slices hold BLOCK elements of E.
            return match E::FUSED? {
                Fused::F32 => Some(unsafe { fused_f32_avx2(ba, bb, atol, rtol, max_rel) }),
                Fused::F64 => Some(unsafe { fused_f64_avx2(ba, bb, atol, rtol, max_rel) }),
            };
        }
    }
    let _ = (ba, bb, len, atol, rtol, max_rel);
    None
}

/// The body of the AVX2 reductions over one block; `$load` yields (x, y, lanes whose bits differ).
#[cfg(target_arch = "x86_64")]
macro_rules! avx2_block {
    ($atol:expr, $rtol:expr, $max_rel:expr, |$i:ident| $load:expr) => {{
        use std::arch::x86_64::*;
        let sign = _mm256_set1_pd(-0.0);
        let zero = _mm256_setzero_pd();
        let one = _mm256_set1_pd(1.0);
        let (va, vr, vm) = (
            _mm256_set1_pd($atol),
            _mm256_set1_pd($rtol),
            _mm256_set1_pd($max_rel),
        );
        let (mut s_ad, mut s_ax, mut s_dd, mut s_xx, mut s_yy, mut s_xy) =
            (zero, zero, zero, zero, zero, zero);
        let (mut c_x, mut c_y, mut c_mm, mut c_rel, mut mx) = (zero, zero, zero, zero, zero);
        let (mut nz_x, mut nz_y) = (0u64, 0u64);
        let mut differ = 0u64;
        let mut ulp = _mm256_setzero_si256();
        let mut has_ulp = false;
        let mut $i = 0;
        while $i < BLOCK {
            let (x, y, d_bits, lane_ulp, nonzero): (
                __m256d,
                __m256d,
                u32,
                Option<__m256i>,
                Option<(u32, u32)>,
            ) = $load;
            differ += u64::from(d_bits);
            if let Some(u) = lane_ulp {
                // Unsigned max of 64-bit lanes; distances are below 2^33 so signed compare works.
                ulp = _mm256_blendv_epi8(ulp, u, _mm256_cmpgt_epi64(u, ulp));
                has_ulp = true;
            }
            let d = _mm256_sub_pd(y, x);
            let ad = _mm256_andnot_pd(sign, d);
            let ax = _mm256_andnot_pd(sign, x);
            s_ad = _mm256_add_pd(s_ad, ad);
            s_ax = _mm256_add_pd(s_ax, ax);
            s_dd = _mm256_fmadd_pd(d, d, s_dd);
            s_xx = _mm256_fmadd_pd(x, x, s_xx);
            s_yy = _mm256_fmadd_pd(y, y, s_yy);
            s_xy = _mm256_fmadd_pd(x, y, s_xy);
            match nonzero {
                // Counted on the integer pipes from the raw bits (the FP pipes are the bottleneck).
                Some((nx, ny)) => {
                    nz_x += u64::from(nx);
                    nz_y += u64::from(ny);
                }
                None => {
                    c_x = _mm256_add_pd(
                        c_x,
                        _mm256_and_pd(_mm256_cmp_pd::<_CMP_NEQ_OQ>(x, zero), one),
                    );
                    c_y = _mm256_add_pd(
                        c_y,
                        _mm256_and_pd(_mm256_cmp_pd::<_CMP_NEQ_OQ>(y, zero), one),
                    );
                }
            }
            let limit = _mm256_add_pd(va, _mm256_mul_pd(vr, ax));
            c_mm = _mm256_add_pd(
                c_mm,
                _mm256_and_pd(_mm256_cmp_pd::<_CMP_GT_OQ>(ad, limit), one),
            );
            // > 0 somewhere when some |d|/|r| may beat max_rel (or |r| = 0 < |d|: the exact
            // revisit skips those). Three ops instead of a count.
            c_rel = _mm256_max_pd(c_rel, _mm256_sub_pd(ad, _mm256_mul_pd(vm, ax)));
            mx = _mm256_max_pd(mx, ad);
            $i += 4;
        }
        let h = |v: __m256d| -> f64 {
            let mut out = [0f64; 4];
            _mm256_storeu_pd(out.as_mut_ptr(), v);
            out.iter().sum()
        };
        let hmax = |v: __m256d| -> f64 {
            let mut out = [0f64; 4];
            _mm256_storeu_pd(out.as_mut_ptr(), v);
            out.iter().copied().fold(0.0, f64::max)
        };
        (
            BlockSums {
                sums: [h(s_ad), h(s_ax), h(s_dd), h(s_xx), h(s_yy), h(s_xy)],
                nonzero_ref: h(c_x) + nz_x as f64,
                nonzero_cand: h(c_y) + nz_y as f64,
                mismatched: h(c_mm),
                rel_hits: hmax(c_rel),
                max_abs: hmax(mx),
                max_ulp: has_ulp.then(|| {
                    let mut out = [0i64; 4];
                    _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, ulp);
                    out.iter().copied().max().unwrap_or(0) as u64
                }),
            },
            differ,
        )
    }};
}

/// AVX2 + FMA version of [`reduce_lanes`] over decoded blocks. The allclose limit is
/// mul-then-add, not fused, so mismatch counts classify borderline elements exactly like the
/// scalar path.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn reduce_avx2(
    xa: &[f64; BLOCK],
    xb: &[f64; BLOCK],
    atol: f64,
    rtol: f64,
    max_rel: f64,
) -> BlockSums {
    avx2_block!(atol, rtol, max_rel, |i| {
        // SAFETY: i < BLOCK, the length of both arrays.
        (
            _mm256_loadu_pd(xa.as_ptr().add(i)),
            _mm256_loadu_pd(xb.as_ptr().add(i)),
            0,
            None,
            None,
        )
    })
    .0
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,popcnt")]
unsafe fn fused_f32_avx2(
    ba: &[u8],
    bb: &[u8],
    atol: f64,
    rtol: f64,
    max_rel: f64,
) -> (BlockSums, u64) {
    avx2_block!(atol, rtol, max_rel, |i| {
        // SAFETY: i < BLOCK and both slices hold BLOCK f32 values.
        let ra = _mm_loadu_si128(ba.as_ptr().add(4 * i) as *const __m128i);
        let rb = _mm_loadu_si128(bb.as_ptr().add(4 * i) as *const __m128i);
        let same = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(ra, rb))) as u32;
        // ULP distance: map bits to a monotonic integer line (negate the magnitude of negative
        // numbers, as `float_ordinal` does), widen to i64, take |a − b|.
        let ordinal = |r: __m128i| {
            let sign = _mm_srai_epi32::<31>(r);
            let mag = _mm_and_si128(r, _mm_set1_epi32(0x7fff_ffff));
            _mm256_cvtepi32_epi64(_mm_sub_epi32(_mm_xor_si128(mag, sign), sign))
        };
        let d = _mm256_sub_epi64(ordinal(ra), ordinal(rb));
        let neg = _mm256_sub_epi64(_mm256_setzero_si256(), d);
        let dist = _mm256_blendv_epi8(d, neg, _mm256_cmpgt_epi64(_mm256_setzero_si256(), d));
        let nonzero = |r: __m128i| {
            let mag = _mm_and_si128(r, _mm_set1_epi32(0x7fff_ffff));
            4 - (_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(mag, _mm_setzero_si128())))
                as u32)
                .count_ones()
        };
        (
            _mm256_cvtps_pd(_mm_castsi128_ps(ra)),
            _mm256_cvtps_pd(_mm_castsi128_ps(rb)),
            4 - same.count_ones(),
            Some(dist),
            Some((nonzero(ra), nonzero(rb))),
        )
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,popcnt")]
unsafe fn fused_f64_avx2(
    ba: &[u8],
    bb: &[u8],
    atol: f64,
    rtol: f64,
    max_rel: f64,
) -> (BlockSums, u64) {
    avx2_block!(atol, rtol, max_rel, |i| {
        // SAFETY: i < BLOCK and both slices hold BLOCK f64 values.
        let ra = _mm256_loadu_si256(ba.as_ptr().add(8 * i) as *const __m256i);
        let rb = _mm256_loadu_si256(bb.as_ptr().add(8 * i) as *const __m256i);
        let same = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(ra, rb))) as u32;
        (
            _mm256_castsi256_pd(ra),
            _mm256_castsi256_pd(rb),
            4 - same.count_ones(),
            None,
            None,
        )
    })
}

/// Element by element: the reference semantics, used for blocks holding NaN/Inf.
fn scalar<E: Element>(a: &[u8], b: &[u8], offset: u64, atol: f64, rtol: f64) -> Stats {
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
}
