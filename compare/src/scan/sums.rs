//! One block's reductions, what every kernel (portable lanes, AVX2) returns: its own module so
//! the kernels and the blocked walk that calls them share it without importing each other.

/// Elements per block: decoded into stack arrays, reduced branch-free.
pub(super) const BLOCK: usize = 256;

/// Branch-free reductions of one block (zero-padded to `BLOCK`). Counts are kept in f64 lanes
/// (exact below 2^53) so that every operation is a plain vector op.
#[derive(Default)]
pub(super) struct BlockSums {
    /// Σ|d|, Σ|r|, Σd², Σr², Σc², Σr·c.
    pub(super) sums: [f64; 6],
    pub(super) nonzero_ref: f64,
    pub(super) nonzero_cand: f64,
    pub(super) mismatched: f64,
    pub(super) max_abs: f64,
    /// Elements whose relative error may beat `max_rel` (revisited exactly).
    pub(super) rel_hits: f64,
    /// Largest ULP distance in the block, when the kernel computed it (f32 on AVX2).
    pub(super) max_ulp: Option<u64>,
}
