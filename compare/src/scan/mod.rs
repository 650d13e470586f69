//! The one-pass kernel: every elementwise metric of a pair of tensors (or a chunk of one) in a
//! single sweep over both buffers, accumulating in f64.
//!
//! Chunks are scanned in parallel and merged with [`Stats::merge`]; maxima keep the lowest
//! index on ties so results do not depend on how the work was split.
//!
//! Files: `stats.rs` (what is accumulated), `element.rs` (how each dtype is read), `blocks.rs`
//! (the blocked kernel), `avx2.rs` (its AVX2 reductions), `scalar.rs` (element by element: the
//! reference semantics and the NaN/Inf path).

#[cfg(target_arch = "x86_64")]
mod avx2;
mod blocks;
mod element;
mod scalar;
mod stats;
mod sums;
#[cfg(test)]
mod tests;

use crate::dtype::TensorDtype;
use blocks::blocks;
use element::*;
pub use stats::{Stats, NONE};

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
