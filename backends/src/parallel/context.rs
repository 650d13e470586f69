//! Context parallelism: how a sequence is split over the cp ranks and put back together.
//!
//! Causal attention makes late positions expensive (they see every earlier key), so a plain
//! split would leave the last rank with most of the work. Megatron/TransformerEngine balance it:
//! the sequence is cut into 2·cp chunks and rank c holds chunks c and 2·cp−1−c (the "zigzag").
//! With padded documents (TransformerEngine's THD layout) each document is cut that way
//! instead, so each row gives a rank its own positions ([`Positions`]). Every per-token value a
//! rank holds is in that local order; [`restore`] puts the global order back, so traces and
//! logits line up with the world-size-1 oracle.
//!
//! Which ranks form the rings is the topology's ([`super::topology`]); this is the data side.

use burn::tensor::{Int, Tensor, TensorData};

use crate::data::Batch;
use crate::positions::Positions;

/// Chunks c and 2·cp−1−c of 2·cp of the positions `span`.
fn chunks(c: usize, cp: usize, span: std::ops::Range<usize>) -> impl Iterator<Item = usize> {
    let chunk = span.len() / (2 * cp);
    let second = 2 * cp - 1 - c;
    let at = span.start;
    (at + c * chunk..at + (c + 1) * chunk).chain(at + second * chunk..at + (second + 1) * chunk)
}

/// The absolute positions rank `c` of `cp` holds of `batch`'s rows of `seq_len` (the whole
/// rows' length; `batch` may be a share, whose starts are the whole rows'). The row layout
/// cuts each row into 2·cp chunks; with padded documents (TransformerEngine's THD layout,
/// `thd_get_partitioned_indices`) each document is cut into its own 2·cp chunks, from its
/// start to the next one's (the last to the row's end), so every document's causal work is
/// balanced too.
pub fn positions(c: usize, cp: usize, seq_len: usize, batch: &Batch) -> Positions {
    if cp == 1 {
        return Positions::shared((0..seq_len).collect());
    }
    if !batch.padded_documents {
        return Positions::shared(chunks(c, cp, 0..seq_len).collect());
    }
    Positions::per_row(
        batch
            .starts
            .iter()
            .map(|starts| {
                let ends = starts.iter().skip(1).copied().chain([seq_len]);
                starts
                    .iter()
                    .zip(ends)
                    .flat_map(|(&a, e)| chunks(c, cp, a..e))
                    .collect()
            })
            .collect(),
    )
}

/// One cp rank's share of a microbatch: every row, its positions only.
#[derive(Clone, Debug)]
pub struct Local {
    /// Tokens and targets at this rank's positions (`seq_len` is the local length; `lengths`
    /// and document `starts` stay the whole rows', which the masks and RoPE compare positions
    /// with).
    pub batch: Batch,
    pub positions: Positions,
}

impl Local {
    /// Each (replica, cp rank)'s share of `mb`, whose rows are `replicas` replicas' rows one
    /// after the other.
    pub fn split(mb: &Batch, cp: usize, replicas: usize) -> Vec<Local> {
        let rows = mb.batch / replicas;
        (0..replicas)
            .flat_map(|d| Self::split_rows(&mb.rows(d * rows, rows), cp))
            .collect()
    }

    /// The catalogued bug: next-token labels made on the rank's own share, by rolling its tokens
    /// one place (`torch.roll(ids, -1)` on the CP shard) instead of shifting once over the whole
    /// sequence. Each label becomes the next *local* token: wrong wherever the next local
    /// position is not the next global one (the end of a zigzag chunk, and the wrap). Ignored
    /// labels stay ignored (the loss mask is built over the whole sequence), so with one rank
    /// nothing changes.
    pub fn roll_targets_locally(&mut self) {
        let (rows, s) = (self.batch.batch, self.batch.seq_len);
        for r in 0..rows {
            for j in 0..s {
                let t = &mut self.batch.targets[r * s + j];
                if *t != crate::data::IGNORE {
                    *t = self.batch.tokens[r * s + (j + 1) % s];
                }
            }
        }
    }

    /// The catalogued bug of the MTP layer's inputs: the rank's share shifted one place by
    /// itself (each position takes the next *local* position's token and label; the share's
    /// last position, and a next position that starts a document, token 0 and an ignored
    /// label) instead of shifting the whole rows before the split ([`Batch::shifted`]). Wrong
    /// wherever the next local position is not the next global one: the end of a zigzag chunk,
    /// and the share's end. With one rank the share is the rows, so nothing changes.
    pub fn shifted_locally(&self) -> Local {
        let mut out = self.clone();
        let (rows, s) = (self.batch.batch, self.batch.seq_len);
        for r in 0..rows {
            let p = self.positions.row(r);
            for j in 0..s {
                let at = r * s + j;
                let next = (j + 1 < s)
                    .then_some(j + 1)
                    .filter(|&n| !self.batch.starts[r].contains(&p[n]));
                let (t, y) = match next {
                    Some(n) => (self.batch.tokens[r * s + n], self.batch.targets[r * s + n]),
                    None => (0, crate::data::IGNORE),
                };
                out.batch.tokens[at] = t;
                out.batch.targets[at] = y;
            }
        }
        out
    }

    /// The catalogued bug of packed rows' positions: the rank's rows with a document starting
    /// at each of its chunks' first positions, as a rank that rebuilds its documents' offsets
    /// from its own share sees them (`cu_seqlens` made after the CP split). RoPE then restarts
    /// every document that began in a chunk another rank holds; with one rank the only chunk
    /// starts at 0, a start already.
    pub fn with_chunk_starts(&self) -> Batch {
        let mut batch = self.batch.clone();
        for (r, starts) in batch.starts.iter_mut().enumerate() {
            let p = self.positions.row(r);
            starts.extend(
                (0..p.len())
                    .filter(|&j| j == 0 || p[j - 1] + 1 != p[j])
                    .map(|j| p[j]),
            );
            starts.sort_unstable();
            starts.dedup();
        }
        batch
    }

    /// Each cp rank's share of `mb`.
    fn split_rows(mb: &Batch, cp: usize) -> Vec<Local> {
        (0..cp)
            .map(|c| {
                let positions = positions(c, cp, mb.seq_len, mb);
                let pick = |v: &[i64]| -> Vec<i64> {
                    (0..mb.batch)
                        .flat_map(|b| {
                            let row = &v[b * mb.seq_len..(b + 1) * mb.seq_len];
                            positions.row(b).iter().map(move |&p| row[p])
                        })
                        .collect()
                };
                Local {
                    batch: Batch {
                        batch: mb.batch,
                        seq_len: positions.len(),
                        tokens: pick(&mb.tokens),
                        targets: pick(&mb.targets),
                        lengths: mb.lengths.clone(),
                        starts: mb.starts.clone(),
                        padded_documents: mb.padded_documents,
                        real: mb.real.clone(),
                    },
                    positions,
                }
            })
            .collect()
    }
}

/// Each (replica, cp rank)'s positions of `mb` (rows: `replicas` replicas' one after the
/// other), in [`Local::split`]'s order: where a trace or the logits put each rank's entries.
pub fn order(mb: &Batch, cp: usize, replicas: usize) -> Vec<Positions> {
    let rows = mb.batch / replicas;
    (0..replicas)
        .flat_map(|d| {
            let share = mb.rows(d * rows, rows);
            (0..cp).map(move |c| positions(c, cp, share.seq_len, &share))
        })
        .collect()
}

/// Per-cp-rank tensors (local order along dim 1) → the whole sequence in global order, each
/// rank's entries put at its `order` positions (one replica's cp ranks, in rank order).
pub fn restore<const D: usize>(parts: Vec<Tensor<D>>, order: &[Positions]) -> Tensor<D> {
    if parts.len() == 1 {
        return parts.into_iter().next().expect("one part");
    }
    assert_eq!(parts.len(), order.len(), "one order per cp rank");
    let all = Tensor::cat(parts, 1);
    let device = all.device();
    let n = order[0].len();
    // Row r's gather index: for each global position, its index in the concatenation.
    let index = |r: usize| {
        let mut at = vec![0i64; n * order.len()];
        for (c, positions) in order.iter().enumerate() {
            for (j, &p) in positions.row(r).iter().enumerate() {
                at[p] = (c * n + j) as i64;
            }
        }
        Tensor::<1, Int>::from_data(TensorData::new(at, [n * order.len()]), &device)
    };
    if order.iter().all(|p| p.common().is_some()) {
        return all.select(1, index(0));
    }
    let rows = all.dims()[0];
    Tensor::cat(
        (0..rows)
            .map(|r| all.clone().narrow(0, r, 1).select(1, index(r)))
            .collect(),
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(seq_len: usize, starts: Vec<Vec<usize>>, padded: bool) -> Batch {
        let n = starts.len();
        Batch {
            batch: n,
            seq_len,
            tokens: vec![1; n * seq_len],
            targets: vec![1; n * seq_len],
            lengths: vec![seq_len; n],
            real: starts
                .iter()
                .map(|s| vec![seq_len / s.len(); s.len()])
                .collect(),
            starts,
            padded_documents: padded,
        }
    }

    #[test]
    fn chunks_balance_and_cover_the_sequence() {
        let one = rows(8, vec![vec![0]], false);
        assert_eq!(positions(0, 2, 8, &one).row(0), [0, 1, 6, 7]);
        assert_eq!(positions(1, 2, 8, &one).row(0), [2, 3, 4, 5]);
        let mut all: Vec<usize> = (0..4)
            .flat_map(|c| {
                positions(c, 4, 16, &rows(16, vec![vec![0]], false))
                    .row(0)
                    .to_vec()
            })
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..16).collect::<Vec<_>>());
    }

    #[test]
    fn padded_documents_are_cut_one_by_one() {
        // Row 0: documents [0, 8) and [8, 16); row 1: one document.
        let b = rows(16, vec![vec![0, 8], vec![0]], true);
        let p = positions(0, 2, 16, &b);
        assert_eq!(p.row(0), [0, 1, 6, 7, 8, 9, 14, 15]);
        assert_eq!(p.row(1), [0, 1, 2, 3, 12, 13, 14, 15]);
        let q = positions(1, 2, 16, &b);
        assert_eq!(q.row(0), [2, 3, 4, 5, 10, 11, 12, 13]);
        // Unpadded, the same starts are cut as one row.
        let rowwise = positions(0, 2, 16, &rows(16, vec![vec![0, 8], vec![0]], false));
        assert_eq!(rowwise.common(), Some(&[0, 1, 2, 3, 12, 13, 14, 15][..]));
    }

    #[test]
    fn restore_puts_each_rank_s_entries_back() {
        let b = rows(8, vec![vec![0, 4], vec![0]], true);
        let device = Default::default();
        let order: Vec<Positions> = (0..2).map(|c| positions(c, 2, 8, &b)).collect();
        // Each rank's values are the global positions it holds: restored, 0..8 in every row.
        let parts = order
            .iter()
            .map(|p| {
                let v: Vec<f32> = (0..2)
                    .flat_map(|r| p.row(r).iter().map(|&x| x as f32))
                    .collect();
                Tensor::<2>::from_data(TensorData::new(v, [2, 4]), &device)
            })
            .collect();
        let whole = restore(parts, &order).into_data().convert::<f32>();
        let want: Vec<f32> = (0..2).flat_map(|_| (0..8).map(|x| x as f32)).collect();
        assert_eq!(whole.try_to_vec::<f32>().unwrap(), want);
    }

    #[test]
    fn mtp_shares_shift_whole_rows_and_the_local_roll_differs_only_under_cp() {
        let thd = meshparity_specs::Packing {
            documents: true,
            prompts: true,
            pad_to: Some(4),
        };
        let b = Batch::synthetic(3, 0, (4, 32, 64), Some(thd));
        // One rank: its share is the rows, so the local roll is the global shift.
        let one = &Local::split(&b, 1, 1)[0];
        assert_eq!(one.shifted_locally().batch, b.shifted());
        // Two: shifted then split is each rank's share of the global shift at its positions;
        // rolled per share, the ends of the zigzag chunks take the wrong neighbour.
        let global = Local::split(&b.shifted(), 2, 1);
        let mut wrong = 0;
        for (c, local) in Local::split(&b, 2, 1).iter().enumerate() {
            let rolled = local.shifted_locally();
            assert_eq!(rolled.positions, global[c].positions);
            wrong += (rolled.batch.tokens.iter().zip(&global[c].batch.tokens))
                .filter(|(a, b)| a != b)
                .count();
        }
        assert!(wrong > 0, "the local roll misplaces chunk-boundary tokens");
    }
}
