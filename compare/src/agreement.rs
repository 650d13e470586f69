//! Agreement metrics that look at rows, not elements: top-1 / top-k of logits, and the per-token
//! expert sets of MoE top-k routing.

use rayon::prelude::*;

use crate::dtype::TensorDtype;

/// Every element as f64. Logits are read a second time here (only tensors named as logits).
fn row_values(dtype: TensorDtype, bytes: &[u8]) -> Vec<f64> {
    let size = dtype.size();
    let mut out = Vec::with_capacity(bytes.len() / size);
    for chunk in bytes.chunks_exact(size) {
        out.push(decode(dtype, chunk).unwrap_or(f64::NAN));
    }
    out
}

/// One element as f64.
pub fn decode(dtype: TensorDtype, b: &[u8]) -> Option<f64> {
    Some(match dtype {
        TensorDtype::F64 => f64::from_le_bytes(b.try_into().ok()?),
        TensorDtype::F32 => f32::from_le_bytes(b.try_into().ok()?) as f64,
        TensorDtype::F16 => half::f16::from_le_bytes(b.try_into().ok()?).to_f64(),
        TensorDtype::BF16 => half::bf16::from_le_bytes(b.try_into().ok()?).to_f64(),
        TensorDtype::I64 => i64::from_le_bytes(b.try_into().ok()?) as f64,
        TensorDtype::I32 => i32::from_le_bytes(b.try_into().ok()?) as f64,
        TensorDtype::I16 => i16::from_le_bytes(b.try_into().ok()?) as f64,
        TensorDtype::I8 => i8::from_le_bytes(b.try_into().ok()?) as f64,
        TensorDtype::U64 => u64::from_le_bytes(b.try_into().ok()?) as f64,
        TensorDtype::U32 => u32::from_le_bytes(b.try_into().ok()?) as f64,
        TensorDtype::U16 => u16::from_le_bytes(b.try_into().ok()?) as f64,
        TensorDtype::U8 | TensorDtype::BOOL => *b.first()? as f64,
    })
}

/// The top-two margin, relative to max(1, |top logit|), at or under which a row's argmax is a
/// near-tie in `dtype`: 8 machine epsilons, as the routing level's (bf16 6.25e-2, f16 7.8e-3,
/// f32 9.5e-7, f64 1.8e-15).
pub fn tie_margin(dtype: TensorDtype) -> f64 {
    8.0 * match dtype {
        TensorDtype::BF16 => 2f64.powi(-7),
        TensorDtype::F16 => 2f64.powi(-10),
        TensorDtype::F32 => f64::from(f32::EPSILON),
        _ => f64::EPSILON,
    }
}

/// Indices of the k largest values, largest first, ties to the lower index: one pass keeping
/// the k best so far (a vocabulary-wide sort per row took half of a forward judge's time).
fn top_k(row: &[f64], k: usize) -> Vec<usize> {
    // `i` goes before `j`: larger, or as large and earlier (a total order: indices differ).
    let before = |i: usize, j: usize| row[i].total_cmp(&row[j]).then(j.cmp(&i)).is_gt();
    if k > TOP_K_SCAN {
        let mut idx: Vec<usize> = (0..row.len()).collect();
        let k = k.min(idx.len());
        if k < idx.len() {
            idx.select_nth_unstable_by(k, |&i, &j| before(j, i).cmp(&before(i, j)));
        }
        idx.truncate(k);
        idx.sort_unstable_by(|&i, &j| before(j, i).cmp(&before(i, j)));
        return idx;
    }
    let mut top: Vec<usize> = Vec::with_capacity(k + 1);
    for i in 0..row.len() {
        if top.len() == k && !before(i, top[k - 1]) {
            continue;
        }
        let at = top.partition_point(|&t| before(t, i));
        top.insert(at, i);
        top.truncate(k);
    }
    top
}

/// Up to this k, [`top_k`] keeps a sorted list in one pass; above, it selects then sorts.
const TOP_K_SCAN: usize = 32;

/// Logits agreement over rows of the last dimension.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct LogitAgreement {
    pub rows: u64,
    /// Fraction of rows whose argmax agrees.
    pub top1: f64,
    /// Rows whose reference top-two margin exceeds the dtype's round-off ([`tie_margin`]): the
    /// rows whose argmax is decided, not a near-tie any reduction order may flip.
    pub decided_rows: u64,
    /// Fraction of decided rows whose argmax agrees (1 when none is decided).
    pub top1_decided: f64,
    /// Mean over rows of |top-k(ref) ∩ top-k(cand)| / k.
    pub topk: f64,
    pub k: usize,
}

pub fn logits(
    dtype: TensorDtype,
    shape: &[usize],
    reference: &[u8],
    candidate: &[u8],
    k: usize,
) -> Option<LogitAgreement> {
    let vocab = *shape.last()?;
    if vocab == 0 || !dtype.is_float() {
        return None;
    }
    let k = k.clamp(1, vocab);
    let (a, b) = (row_values(dtype, reference), row_values(dtype, candidate));
    let rows = a.len() / vocab;
    let tie = tie_margin(dtype);
    let (agree, overlap, decided, decided_agree) = a
        .par_chunks(vocab)
        .zip(b.par_chunks(vocab))
        .map(|(ra, rb)| {
            let (ta, tb) = (top_k(ra, k.max(2).min(vocab)), top_k(rb, k));
            let common = ta.iter().take(k).filter(|i| tb.contains(i)).count();
            let same = (ta[0] == tb[0]) as u64;
            let margin = ta.get(1).map_or(f64::INFINITY, |&j| ra[ta[0]] - ra[j]);
            let decided = margin > tie * ra[ta[0]].abs().max(1.0);
            // Counts, not fractions: an integer sum is the same in any order the pool's
            // threads reduce it in (a sum of fractions differed in its last bit run to run).
            (same, common as u64, decided as u64, same * decided as u64)
        })
        .reduce(
            || (0, 0, 0, 0),
            |x, y| (x.0 + y.0, x.1 + y.1, x.2 + y.2, x.3 + y.3),
        );
    Some(LogitAgreement {
        rows: rows as u64,
        decided_rows: decided,
        top1_decided: if decided == 0 {
            1.0
        } else {
            decided_agree as f64 / decided as f64
        },
        top1: if rows == 0 {
            1.0
        } else {
            agree as f64 / rows as f64
        },
        topk: if rows == 0 {
            1.0
        } else {
            overlap as f64 / (rows * k) as f64
        },
        k,
    })
}

/// MoE routing agreement: rows of the last dimension are each token's chosen expert ids.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct RoutingAgreement {
    pub tokens: u64,
    /// Mean per-token |A ∩ B| / k.
    pub overlap: f64,
    /// Fraction of tokens whose expert sets differ.
    pub mismatch: f64,
}

pub fn routing(
    dtype: TensorDtype,
    shape: &[usize],
    reference: &[u8],
    candidate: &[u8],
) -> Option<RoutingAgreement> {
    let k = *shape.last()?;
    if k == 0 || dtype.is_float() {
        return None;
    }
    let size = dtype.size();
    let ids = |bytes: &[u8]| -> Vec<i128> {
        bytes
            .chunks_exact(size)
            .map(|c| decode(dtype, c).unwrap_or(-1.0) as i128)
            .collect()
    };
    let (a, b) = (ids(reference), ids(candidate));
    let tokens = a.len() / k;
    let (overlap, differ) = a
        .par_chunks(k)
        .zip(b.par_chunks(k))
        .map(|(ra, rb)| {
            let mut sa = ra.to_vec();
            let mut sb = rb.to_vec();
            sa.sort_unstable();
            sb.sort_unstable();
            let common = sa.iter().filter(|x| sb.binary_search(x).is_ok()).count();
            // A count: the same sum in any order the threads reduce it in.
            (common as u64, (sa != sb) as u64)
        })
        .reduce(|| (0, 0), |x, y| (x.0 + y.0, x.1 + y.1));
    Some(RoutingAgreement {
        tokens: tokens as u64,
        overlap: if tokens == 0 {
            1.0
        } else {
            overlap as f64 / (tokens * k) as f64
        },
        mismatch: if tokens == 0 {
            0.0
        } else {
            differ as f64 / tokens as f64
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_the_sorted_order_with_ties_to_the_lower_index() {
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        for len in [1usize, 2, 7, 64, 300] {
            // Few distinct values, so ties are common; a NaN and infinities as well.
            let mut row: Vec<f64> = (0..len)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % 9) as f64 - 4.0
                })
                .collect();
            if len > 5 {
                row[1] = f64::NAN;
                row[3] = f64::INFINITY;
                row[4] = f64::NEG_INFINITY;
            }
            let mut sorted: Vec<usize> = (0..len).collect();
            sorted.sort_by(|&i, &j| row[j].total_cmp(&row[i]).then(i.cmp(&j)));
            for k in [1, 2, 5, 32, 33, 100, len] {
                let k = k.min(len);
                assert_eq!(top_k(&row, k), sorted[..k], "len {len} k {k}");
            }
        }
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn logits_top1_and_topk_by_hand() {
        // Two rows of vocab 4. Row 0: same argmax (2), top-2 {2,0} vs {2,1} → overlap 1/2.
        // Row 1: argmax 3 vs 0 → disagree; top-2 {3,0} vs {0,3} → overlap 1.
        let a = f32s(&[0.5, 0.1, 0.9, 0.0, 0.7, 0.1, 0.2, 0.8]);
        let b = f32s(&[0.1, 0.5, 0.9, 0.0, 0.8, 0.1, 0.2, 0.7]);
        let r = logits(TensorDtype::F32, &[2, 4], &a, &b, 2).unwrap();
        assert_eq!(r.rows, 2);
        assert_eq!(r.top1, 0.5);
        assert_eq!(r.topk, 0.75);
        // Both rows decided in f32 (margins 0.4 and 0.1 ≫ 8 ε): the flip in row 1 counts.
        assert_eq!((r.decided_rows, r.top1_decided), (2, 0.5));
    }

    /// A near-tie — the reference's top two within the dtype's round-off — is reported, not
    /// gated: in bf16 (8 ε = 6.25e-2) row 1's margin 0.05 is a tie, row 0's 0.4 is not.
    #[test]
    fn top1_decided_leaves_near_ties_out() {
        let bf16s = |v: &[f32]| -> Vec<u8> {
            v.iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect()
        };
        let a = bf16s(&[0.5, 0.1, 0.9, 0.0, 0.75, 0.1, 0.2, 0.8]);
        let b = bf16s(&[0.1, 0.5, 0.9, 0.0, 0.8, 0.1, 0.2, 0.75]);
        let r = logits(TensorDtype::BF16, &[2, 4], &a, &b, 2).unwrap();
        assert_eq!(r.top1, 0.5);
        assert_eq!((r.decided_rows, r.top1_decided), (1, 1.0));
    }

    #[test]
    fn routing_overlap_by_hand() {
        // Tokens: {1,2} vs {2,1} (same set), {0,3} vs {0,2} (half), {1,3} vs {0,2} (none).
        let ids = |v: &[i64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let r = routing(
            TensorDtype::I64,
            &[3, 2],
            &ids(&[1, 2, 0, 3, 1, 3]),
            &ids(&[2, 1, 0, 2, 0, 2]),
        )
        .unwrap();
        assert_eq!(r.tokens, 3);
        assert_eq!(r.overlap, 0.5);
        assert!((r.mismatch - 2.0 / 3.0).abs() < 1e-12);
    }
}
