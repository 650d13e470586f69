//! Element by element: the reference semantics, used for blocks holding NaN/Inf (and by tests
//! as the definition the blocked kernel must agree with).

use super::element::Element;
use super::stats::Stats;

/// Element by element, in order.
pub(super) fn scalar<E: Element>(a: &[u8], b: &[u8], offset: u64, atol: f64, rtol: f64) -> Stats {
    let mut s = Stats {
        n: (a.len() / E::SIZE) as u64,
        ..Stats::default()
    };
    for (i, (ea, eb)) in a
        .chunks_exact(E::SIZE)
        .zip(b.chunks_exact(E::SIZE))
        .enumerate()
    {
        let at = offset + i as u64;
        let (x, xb) = E::load(ea);
        let (y, yb) = E::load(eb);
        if xb != yb {
            s.bit_difference(at, (E::ordinal(xb) - E::ordinal(yb)).unsigned_abs());
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
        s.nonzero_ref += u64::from(x != 0.0);
        s.nonzero_cand += u64::from(y != 0.0);
        let d = y - x;
        let (ad, ax) = (d.abs(), x.abs());
        s.sum_abs_diff += ad;
        s.sum_abs_ref += ax;
        s.sum_sq_diff += d * d;
        s.sum_sq_ref += x * x;
        s.sum_sq_cand += y * y;
        s.dot += x * y;
        s.mismatched += u64::from(s.track(at, ad, ax, atol, rtol));
    }
    s
}
