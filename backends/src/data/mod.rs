//! Synthetic training data that makes parallelization bugs observable.
//!
//! Sequences have different lengths (padding), and the lengths grow with the row index: the
//! first rows are short and the last ones long. Any contiguous split of the batch — data-parallel
//! shards, microbatches — therefore holds very unequal token counts (the second of two halves
//! about 3× the first), and the last shard or microbatch holds the most. So a loss normalized by
//! a local token count instead of the global one, a lost last microbatch or a wrongly scaled last
//! rank change gradients by tens of percent in every dtype, not by the few percent random
//! lengths gave (which bf16 round-off could hide). Tokens
//! follow a skewed distribution with repeated motifs, so the model has something to learn and
//! the loss curve moves.
//!
//! With packing (`packed_sequences`, `mask_prompts`) a row holds several documents of random
//! lengths: attention stays inside a document, positions restart at each document's first
//! token, no label crosses a boundary, and a prompt at each document's head has its labels
//! ignored. The document draws come from a stream of their own, so the tokens are the unpacked
//! run's and only the labels and masks change — except where documents are padded
//! (`pad_documents_to`, TransformerEngine's THD layout for context parallelism): each document's
//! tail up to the multiple holds token 0 with ignored labels.

use meshparity_specs::Packing;

use crate::rng::SplitMix;

/// Target id marking a position that does not count (padding, or the last real token).
pub const IGNORE: i64 = -100;

/// One global batch: `batch` sequences of `seq_len` tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub batch: usize,
    pub seq_len: usize,
    /// Row-major [batch, seq_len]; padding positions hold token 0.
    pub tokens: Vec<i64>,
    /// Row-major [batch, seq_len]: the next token, or [`IGNORE`].
    pub targets: Vec<i64>,
    /// Real length of each sequence (≥ 2).
    pub lengths: Vec<usize>,
    /// Each row's document starts, ascending from 0 (`[0]`: one document). Like `lengths`, a
    /// fact about the whole row that a context-parallel share keeps in global positions.
    pub starts: Vec<Vec<usize>>,
    /// Whether each document is padded to a multiple of 2·cp (`pad_documents_to`, the THD
    /// layout): context parallelism then cuts each document into chunks, not each row.
    pub padded_documents: bool,
    /// Each row's documents' real token counts, their padding left out (`[len]` for a row of
    /// one document): what the unpadded `cu_seqlens` hold beside the padded starts.
    pub real: Vec<Vec<usize>>,
}

impl Batch {
    /// The batch of training step `step` (0 is the fixed batch the forward level uses).
    pub fn synthetic(
        seed: u64,
        step: u64,
        (batch, seq_len, vocab): (usize, usize, usize),
        packing: Option<Packing>,
    ) -> Self {
        let mut r = SplitMix::new(seed, &format!("batch.{step}"));
        let mut tokens = vec![0i64; batch * seq_len];
        let mut targets = vec![IGNORE; batch * seq_len];
        let mut lengths = Vec::with_capacity(batch);
        let motif: Vec<i64> = (0..4)
            .map(|_| 1 + r.below(vocab as u64 - 1) as i64)
            .collect();
        for b in 0..batch {
            // From 2 tokens (row 0) up to all of seq_len (the last row), with a little jitter:
            // every batch pads, and earlier rows pad more.
            let grow = ((b + 1) * (seq_len - 2)) / batch.max(1);
            let len = (2 + grow - r.below(2) as usize).clamp(2, seq_len);
            lengths.push(len);
            for s in 0..len {
                // Skewed: small ids are common (x² of a uniform), a motif recurs.
                let t = if r.below(4) == 0 {
                    motif[s % motif.len()]
                } else {
                    let u = (r.uniform() + 1.0) / 2.0;
                    1 + ((u * u) * (vocab - 1) as f64) as i64
                };
                tokens[b * seq_len + s] = t.min(vocab as i64 - 1);
            }
            for s in 0..len - 1 {
                targets[b * seq_len + s] = tokens[b * seq_len + s + 1];
            }
        }
        let mut out = Self {
            batch,
            seq_len,
            tokens,
            targets,
            starts: vec![vec![0]; batch],
            real: lengths.iter().map(|&l| vec![l]).collect(),
            lengths,
            padded_documents: false,
        };
        if let Some(p) = packing {
            out.pack(SplitMix::new(seed, &format!("documents.{step}")), p);
            out.padded_documents = p.documents && p.pad_to.is_some_and(|m| m > 1);
        }
        out
    }

    /// Cuts each row into documents and ignores the labels that cross a boundary or belong to
    /// a prompt. With a padding multiple, each document but the row's last ends in padding
    /// (token 0, labels ignored) up to the next multiple, where the next document starts.
    fn pack(&mut self, mut r: SplitMix, packing: Packing) {
        let s = self.seq_len;
        let m = packing.pad_to.map_or(1, |m| m as usize);
        for b in 0..self.batch {
            let len = self.lengths[b];
            // Each document's first position and the end of its real tokens.
            let mut docs = Vec::new();
            let mut start = 0;
            loop {
                if !packing.documents {
                    docs.push((0, len));
                    break;
                }
                // Documents of 2 to 2 + s/3 tokens: a long row holds several.
                let end = (start + 2 + r.below((s as u64 / 3).max(1)) as usize).min(len);
                let next = end.next_multiple_of(m);
                if next >= len {
                    docs.push((start, len));
                    break;
                }
                docs.push((start, end));
                for p in end..next {
                    self.tokens[b * s + p] = 0;
                    self.targets[b * s + p] = IGNORE;
                }
                // The label of a document's last token would be the next one's first (or
                // padding).
                self.targets[b * s + end - 1] = IGNORE;
                start = next;
            }
            if packing.prompts {
                for &(start, end) in &docs {
                    // A prompt of 1 to half the document's tokens; the labels predicting its
                    // tokens after the first are ignored.
                    let prompt = 1 + r.below(((end - start) / 2).max(1) as u64) as usize;
                    for p in start..start + prompt - 1 {
                        self.targets[b * s + p] = IGNORE;
                    }
                }
            }
            self.starts[b] = docs.iter().map(|&(start, _)| start).collect();
            self.real[b] = docs.iter().map(|&(start, end)| end - start).collect();
        }
    }

    /// The first position of the document that holds position `p` of row `row`.
    pub fn document_start(&self, row: usize, p: usize) -> usize {
        let starts = &self.starts[row];
        starts[starts.partition_point(|&s| s <= p) - 1]
    }

    /// The rows with their document starts made from the real token counts, the padding left
    /// out (the unpadded `cu_seqlens` where the padded ones belong): each start after the first
    /// moves back by the padding before it. Unpadded rows are unchanged.
    pub fn unpadded_starts(&self) -> Batch {
        let starts = self
            .real
            .iter()
            .map(|real| {
                let mut at = 0;
                real.iter()
                    .map(|n| {
                        let start = at;
                        at += n;
                        start
                    })
                    .collect()
            })
            .collect();
        Batch {
            starts,
            ..self.clone()
        }
    }

    /// The multi-token prediction layer's inputs and labels: at each position the next
    /// position's token and target, within the document only (DeepSeek-V3's MTP at depth 1
    /// reads the next token's embedding and predicts the one after). A document's last
    /// position, a row's last and padding get token 0 and an ignored label. Shifted over the
    /// whole rows, before context parallelism shards them (torchtitan PR#4544's "shift, then
    /// shard"); lengths and document starts stay the rows', so the masks and positions are the
    /// main model's.
    pub fn shifted(&self) -> Batch {
        let s = self.seq_len;
        let mut out = self.clone();
        for b in 0..self.batch {
            for i in 0..s {
                let next = i + 1;
                let inside = next < s && self.document_start(b, next) == self.document_start(b, i);
                let (t, y) = if inside {
                    (self.tokens[b * s + next], self.targets[b * s + next])
                } else {
                    (0, IGNORE)
                };
                out.tokens[b * s + i] = t;
                out.targets[b * s + i] = y;
            }
        }
        out
    }

    /// Whether any row holds more than one document.
    pub fn packed(&self) -> bool {
        self.starts.iter().any(|s| s.len() > 1)
    }

    /// Tokens that count toward the loss.
    pub fn counted(&self) -> usize {
        self.targets.iter().filter(|&&t| t != IGNORE).count()
    }

    /// Rows `start..start + n` (a data-parallel shard or a microbatch).
    /// Each row's digest ([`meshparity_engine::inputs::row_digest`] of its token ids, padding
    /// included): what a rank that takes rows `start..start + n` trained on.
    pub fn row_digests(&self, start: usize, n: usize) -> Vec<String> {
        self.tokens[start * self.seq_len..(start + n) * self.seq_len]
            .chunks(self.seq_len.max(1))
            .map(meshparity_engine::inputs::row_digest)
            .collect()
    }

    pub fn rows(&self, start: usize, n: usize) -> Batch {
        let span = start * self.seq_len..(start + n) * self.seq_len;
        Batch {
            batch: n,
            seq_len: self.seq_len,
            tokens: self.tokens[span.clone()].to_vec(),
            targets: self.targets[span].to_vec(),
            lengths: self.lengths[start..start + n].to_vec(),
            starts: self.starts[start..start + n].to_vec(),
            padded_documents: self.padded_documents,
            real: self.real[start..start + n].to_vec(),
        }
    }

    /// Several batches' rows one after the other (the replicas that run in lockstep).
    pub fn stack(parts: &[Batch]) -> Batch {
        Batch {
            batch: parts.iter().map(|b| b.batch).sum(),
            seq_len: parts[0].seq_len,
            tokens: parts.iter().flat_map(|b| b.tokens.clone()).collect(),
            targets: parts.iter().flat_map(|b| b.targets.clone()).collect(),
            lengths: parts.iter().flat_map(|b| b.lengths.clone()).collect(),
            starts: parts.iter().flat_map(|b| b.starts.clone()).collect(),
            padded_documents: parts[0].padded_documents,
            real: parts.iter().flat_map(|b| b.real.clone()).collect(),
        }
    }
}

#[cfg(test)]
mod tests;
