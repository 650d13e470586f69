//! What one pass over a pair of buffers accumulates.

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
    /// A pair whose bits differ at `at`, `ulp` apart on the ordinal line.
    #[inline(always)]
    pub(super) fn bit_difference(&mut self, at: u64, ulp: u128) {
        if self.bit_diff == 0 {
            self.first_bit_diff = at;
        }
        self.bit_diff += 1;
        self.max_ulp = self.max_ulp.max(ulp.min(u64::MAX as u128) as u64);
    }

    /// The indexed maxima for one finite pair (|d|, |r|): largest |d|, largest |d|/|r| (r ≠ 0),
    /// worst allclose excess. Returns whether the pair is an allclose mismatch. Strict `>` keeps
    /// the first index on ties.
    #[inline(always)]
    pub(super) fn track(&mut self, at: u64, ad: f64, ax: f64, atol: f64, rtol: f64) -> bool {
        if ad > self.max_abs {
            self.max_abs = ad;
            self.max_abs_at = at;
        }
        // Multiply first: the division only runs for a likely new maximum.
        if ax > 0.0 && ad > self.max_rel * ax {
            let q = ad / ax;
            if q > self.max_rel {
                self.max_rel = q;
                self.max_rel_at = at;
            }
        }
        let limit = atol + rtol * ax;
        let mismatch = ad > limit;
        if mismatch {
            let excess = if limit > 0.0 {
                ad / limit
            } else {
                f64::INFINITY
            };
            if excess > self.worst_excess {
                self.worst_excess = excess;
                self.worst_at = at;
            }
        }
        mismatch
    }

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
