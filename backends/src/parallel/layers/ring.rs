//! Attention of one stage's ranks: on each rank's whole sequence, or around the context-parallel
//! ring.
//!
//! Ring attention (Liu et al.; Megatron/TransformerEngine's `AttnFuncWithCPAndKVP2P`): each
//! rank computes its queries' attention over its own K/V chunk, passes the chunk on to the
//! next rank of the ring and receives the previous rank's, cp − 1 times, so every rank sees
//! every chunk once. Each step yields a partial output and its log-sum-exp; the partials merge
//! exactly by online softmax ([`merge_blocks`]). The causal mask of a step compares this rank's
//! positions with those of the rank the chunk came from. Backward runs the ring in reverse: the
//! gradient of each received chunk travels back to the rank that owns it (the tape's
//! conjugate of [`Conj::Ring`]), where the K/V projections take it.

use burn::tensor::Tensor;

use super::ctx::{LayerFaults, StageCtx};
use super::faulty;
use crate::data::Batch;
use crate::llama::layers::{
    attention, attention_block, attention_mask, attention_mask_at, linear, merge_blocks, rope_at,
};
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::tape::{Conj, Tape, Val};
use crate::parallel::context::{positions, Local};

/// [B, S, N·D] → [B, N, S, D]
fn heads(t: Tensor<3>, n: usize, d: usize) -> Tensor<4> {
    let [b, s, _] = t.dims();
    t.reshape([b, s, n, d]).swap_dims(1, 2)
}

/// [B, N, S, D] → [B, S, N·D]
fn flat(t: Tensor<4>) -> Tensor<3> {
    let [b, n, s, d] = t.dims();
    t.swap_dims(1, 2).reshape([b, s, n * d])
}

impl StageCtx<'_> {
    fn head_dims(&self) -> (usize, usize, usize) {
        let tp = self.groups().tp;
        (
            self.model.heads as usize / tp,
            self.model.kv_heads as usize / tp,
            (self.model.hidden / self.model.heads) as usize,
        )
    }

    /// RoPE at `local`'s positions, or the faulty one whose backward swaps its outputs (or
    /// whose packed positions restart at each chunk).
    fn rotate(t: Tensor<4>, local: &Local, f: LayerFaults) -> Tensor<4> {
        let chunked;
        let rows = if f.positions_from_chunks && local.batch.packed() {
            chunked = local.with_chunk_starts();
            &chunked
        } else if f.unpadded_boundaries && local.batch.padded_documents {
            chunked = local.batch.unpadded_starts();
            &chunked
        } else {
            &local.batch
        };
        if f.rope_swapped {
            faulty::rope_swapped_backward(t, local.positions.lists(), rows)
        } else {
            rope_at(t, local.positions.lists(), rows)
        }
    }

    /// Attention and the row-parallel o projection on each TP rank's whole sequence (no CP):
    /// the partial outputs the `attn.o` reduction sums.
    pub(super) fn local_attention(
        &self,
        tape: &mut Tape,
        locals: &[Local],
        l: u32,
        hn: &[Val],
        f: LayerFaults,
    ) -> Vec<Val> {
        let w = |i: usize, s: &str| self.w(i, &format!("layers.{l}.{s}"));
        let (nq, nkv, hd) = self.head_dims();
        let g = self.groups();
        // One mask per replica (their rows' lengths differ).
        let masks: Vec<_> = locals
            .iter()
            .map(|local| attention_mask(&local.batch, self.device))
            .collect();
        tape.per_rank(self.ranks(), &[hn], |i, v| {
            let local = &locals[g.local_of(i)];
            let (b, s) = (local.batch.batch, local.batch.seq_len);
            let mask = masks[g.local_of(i)].clone();
            let h = v[0].clone();
            let q = heads(linear(h.clone(), w(i, "attn.q.weight")), nq, hd);
            let k = heads(linear(h.clone(), w(i, "attn.k.weight")), nkv, hd);
            let v = heads(linear(h, w(i, "attn.v.weight")), nkv, hd);
            let rot = |t| Self::rotate(t, local, f);
            let keep = self.attention_keep(i, l, local, &local.positions);
            let a = attention(rot(q), rot(k), v, mask, keep);
            let a: Tensor<3> = a.swap_dims(1, 2).reshape([b, s, nq * hd]);
            linear(a, w(i, "attn.o.weight"))
        })
    }

    /// Ring attention over the CP ranks, then the row-parallel o projection.
    pub(super) fn ring_attention(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        locals: &[Local],
        l: u32,
        hn: &[Val],
        f: LayerFaults,
    ) -> Vec<Val> {
        let w = |i: usize, s: &str| self.w(i, &format!("layers.{l}.{s}"));
        let (nq, nkv, hd) = self.head_dims();
        let (g, cp) = (self.groups(), self.topo.cp());
        // Each rank's own K (rotated at its positions) and V, packed: [B, S, 2·Nkv·D].
        let kv = tape.per_rank(self.ranks(), &[hn], |i, v| {
            let h = v[0].clone();
            let k = heads(linear(h.clone(), w(i, "attn.k.weight")), nkv, hd);
            let v = heads(linear(h, w(i, "attn.v.weight")), nkv, hd);
            let k = Self::rotate(k, &locals[g.local_of(i)], f);
            Tensor::cat(vec![flat(k), flat(v)], 2)
        });
        // kvs[j]: the chunk each rank holds at ring step j (rank c holds rank c − j's).
        let mut kvs = vec![kv];
        for j in 1..cp {
            let site = format!("layers.{l}.attn.kv.ring{j}");
            let next = tape.collective(comm, Conj::Ring, &site, self.ranks(), &kvs[j - 1]);
            kvs.push(next);
        }
        let inputs: Vec<&[Val]> = std::iter::once(hn)
            .chain(kvs.iter().map(Vec::as_slice))
            .collect();
        // The catalogued bug: the chunks that arrive around the ring are masked without their
        // documents' boundaries.
        let crossing = self.policies.data.ring_crosses_documents;
        let packed = locals.iter().any(|local| local.batch.packed());
        if crossing && packed {
            let why = "each CP rank masked the chunks it received without their documents";
            comm.event(&format!("layers.{l}.attn.ring"), why);
        }
        if f.positions_from_chunks && packed {
            let why = "each CP rank restarted its documents' positions at its own chunks";
            comm.event(&format!("layers.{l}.attn.rope"), why);
        }
        let unpadded = f.unpadded_boundaries && locals.iter().any(|l| l.batch.padded_documents);
        if unpadded {
            let why = "each CP rank took its documents' boundaries from the unpadded lengths";
            comm.event(&format!("layers.{l}.attn.documents"), why);
        }
        tape.per_rank(self.ranks(), &inputs, |i, v| {
            let (c, local) = (g.cp_of(i), &locals[g.local_of(i)]);
            let (b, s) = (local.batch.batch, local.batch.seq_len);
            // What the masks compare positions with: the documents as this rank knows them.
            let bounded = unpadded.then(|| local.batch.unpadded_starts());
            let own = bounded.as_ref().unwrap_or(&local.batch);
            let unpacked = crossing.then(|| Batch {
                starts: vec![vec![0]; b],
                ..local.batch.clone()
            });
            let q = heads(linear(v[0].clone(), w(i, "attn.q.weight")), nq, hd);
            let q = Self::rotate(q, local, f);
            let blocks: Vec<(Tensor<4>, Tensor<4>)> = (0..cp)
                .map(|j| {
                    let source = (c + cp - j) % cp;
                    let chunk = &v[1 + j];
                    let k = heads(chunk.clone().narrow(2, 0, nkv * hd), nkv, hd);
                    let val = heads(chunk.clone().narrow(2, nkv * hd, nkv * hd), nkv, hd);
                    let keys = positions(source, cp, local.batch.seq_len * cp, &local.batch);
                    let rows = unpacked.as_ref().filter(|_| j > 0).unwrap_or(own);
                    let mask =
                        attention_mask_at(rows, local.positions.lists(), keys.lists(), self.device);
                    let keep = self.attention_keep(i, l, local, &keys);
                    attention_block(q.clone(), k, val, mask, keep)
                })
                .collect();
            let blocks = if f.stale_kv_backward {
                faulty::stale_kv_backward(blocks)
            } else {
                blocks
            };
            let a = if f.unweighted_merge {
                faulty::unweighted_merge(blocks)
            } else {
                merge_blocks(blocks)
            };
            linear(flat(a).reshape([b, s, nq * hd]), w(i, "attn.o.weight"))
        })
    }
}
