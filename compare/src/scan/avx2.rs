//! AVX2 + FMA versions of the block reductions (x86_64 only; chosen at run time).

use super::sums::{BlockSums, BLOCK};

/// The body of the AVX2 reductions over one block; `$load` yields (x, y, lanes whose bits differ).
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
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn reduce(
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

#[target_feature(enable = "avx2,fma,popcnt")]
pub(super) unsafe fn fused_f32(
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

#[target_feature(enable = "avx2,fma,popcnt")]
pub(super) unsafe fn fused_f64(
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
