//! Context parallelism: how a sequence is split over the cp ranks and put back together.
//!
//! Causal attention makes late positions expensive (they see every earlier key), so a plain
//! split would leave the last rank with most of the work. Megatron/TransformerEngine balance it:
//! the sequence is cut into 2·cp chunks and rank c holds chunks c and 2·cp−1−c (the "zigzag").
//! Every per-token value a rank holds is in that local order; [`zigzag`] restores the global
//! order, so traces and logits line up with the world-size-1 oracle.
//!
//! Which ranks form the rings is the topology's ([`super::topology`]); this is the data side.

use burn::tensor::Tensor;

use crate::data::Batch;

/// The absolute positions rank `c` of `cp` holds of a sequence of `seq_len`: chunks c and
/// 2·cp−1−c of 2·cp.
pub fn positions(c: usize, cp: usize, seq_len: usize) -> Vec<usize> {
    if cp == 1 {
        return (0..seq_len).collect();
    }
    let chunk = seq_len / (2 * cp);
    let second = 2 * cp - 1 - c;
    (c * chunk..(c + 1) * chunk)
        .chain(second * chunk..(second + 1) * chunk)
        .collect()
}

/// One cp rank's share of a microbatch: every row, its positions only.
#[derive(Clone, Debug)]
pub struct Local {
    /// Tokens and targets at this rank's positions (`seq_len` is the local length; `lengths`
    /// and document `starts` stay the whole rows', which the masks and RoPE compare positions
    /// with).
    pub batch: Batch,
    pub positions: Vec<usize>,
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

    /// The catalogued bug of packed rows' positions: the rank's rows with a document starting
    /// at each of its chunks' first positions, as a rank that rebuilds its documents' offsets
    /// from its own share sees them (`cu_seqlens` made after the CP split). RoPE then restarts
    /// every document that began in a chunk another rank holds; with one rank the only chunk
    /// starts at 0, a start already.
    pub fn with_chunk_starts(&self) -> Batch {
        let p = &self.positions;
        let chunks: Vec<usize> = (0..p.len())
            .filter(|&j| j == 0 || p[j - 1] + 1 != p[j])
            .map(|j| p[j])
            .collect();
        let mut batch = self.batch.clone();
        for starts in &mut batch.starts {
            starts.extend(&chunks);
            starts.sort_unstable();
            starts.dedup();
        }
        batch
    }

    /// Each cp rank's share of `mb`.
    fn split_rows(mb: &Batch, cp: usize) -> Vec<Local> {
        (0..cp)
            .map(|c| {
                let positions = positions(c, cp, mb.seq_len);
                let pick = |v: &[i64]| -> Vec<i64> {
                    (0..mb.batch)
                        .flat_map(|b| positions.iter().map(move |&p| v[b * mb.seq_len + p]))
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
                    },
                    positions,
                }
            })
            .collect()
    }
}

/// Per-cp-rank tensors (local order along dim 1) → the whole sequence in global order.
pub fn zigzag<const D: usize>(parts: Vec<Tensor<D>>) -> Tensor<D> {
    let cp = parts.len();
    if cp == 1 {
        return parts.into_iter().next().expect("one part");
    }
    let chunk = parts[0].dims()[1] / 2;
    let chunks: Vec<Tensor<D>> = (0..2 * cp)
        .map(|j| {
            if j < cp {
                parts[j].clone().narrow(1, 0, chunk)
            } else {
                parts[2 * cp - 1 - j].clone().narrow(1, chunk, chunk)
            }
        })
        .collect();
    Tensor::cat(chunks, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_balance_and_cover_the_sequence() {
        assert_eq!(positions(0, 2, 8), vec![0, 1, 6, 7]);
        assert_eq!(positions(1, 2, 8), vec![2, 3, 4, 5]);
        let mut all: Vec<usize> = (0..4).flat_map(|c| positions(c, 4, 16)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..16).collect::<Vec<_>>());
    }
}
