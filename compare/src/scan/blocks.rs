//! The blocked kernel: branch-free reductions per block of elements, revisited element by
//! element only for what reductions cannot tell.

use super::element::{Element, Fused};
use super::stats::Stats;
use super::sums::{BlockSums, BLOCK};

/// Independent accumulators per sum, so additions pipeline and vectorize.
const LANES: usize = 4;

#[inline(always)]
fn reduce(xa: &[f64; BLOCK], xb: &[f64; BLOCK], atol: f64, rtol: f64, max_rel: f64) -> BlockSums {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has the features the function is compiled for (checked above).
            return unsafe { super::avx2::reduce(xa, xb, atol, rtol, max_rel) };
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
pub(super) fn blocks<E: Element>(a: &[u8], b: &[u8], offset: u64, atol: f64, rtol: f64) -> Stats {
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
                s.merge(&super::scalar::scalar::<E>(ba, bb, at, atol, rtol));
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
            s.merge(&super::scalar::scalar::<E>(ba, bb, at, atol, rtol));
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
                s.bit_difference(
                    at + i as u64,
                    (E::ordinal(xbits) - E::ordinal(ybits)).unsigned_abs(),
                );
            }
        }
    }
    if r.max_abs > s.max_abs || r.rel_hits > 0.0 || r.mismatched > 0.0 {
        for (i, (ea, eb)) in pairs() {
            let (x, y) = (E::load(ea).0, E::load(eb).0);
            s.track(at + i as u64, (y - x).abs(), x.abs(), atol, rtol);
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
                Fused::F32 => Some(unsafe { super::avx2::fused_f32(ba, bb, atol, rtol, max_rel) }),
                Fused::F64 => Some(unsafe { super::avx2::fused_f64(ba, bb, atol, rtol, max_rel) }),
            };
        }
    }
    let _ = (ba, bb, len, atol, rtol, max_rel);
    None
}
