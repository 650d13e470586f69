//! The ranks' random streams: which block of dropout's global mask each rank draws
//! (Megatron's `CudaRNGStatesTracker`; torch DTensor's `OffsetBasedRNGTracker`).
//!
//! Megatron keeps two kinds of state. The default generator is seeded alike on a TP group's
//! ranks, for regions where every TP rank holds the same activation (the residual stream
//! without SP): each draws the same mask. The model-parallel generator (`tracker.fork()`) is
//! seeded per TP rank, for regions where each rank holds its own part (attention's heads, the
//! sequence chunk under SP): each draws a different mask. Context parallelism splits the
//! sequence again, so a CP rank's draws must be its own chunks' (Megatron PR#4828's
//! CP-aware states). Here a stream is what a rank's local indices mean globally — the mask is
//! then the oracle's block ([`crate::dropout`]) — and the catalogued bugs are streams that
//! mean the wrong thing.

use burn::tensor::Tensor;

use super::ctx::StageCtx;
use crate::dropout::{Block, Dropout, Site};
use crate::parallel::comm::collective::Comm;
use crate::parallel::context::Local;
use crate::positions::Positions;

/// The region a mask is drawn in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    /// Every TP rank holds the same values (Megatron's default generator).
    Replicated,
    /// Each TP rank holds its own part (Megatron's model-parallel generator).
    TensorParallel,
}

impl StageCtx<'_> {
    /// Dropout's multipliers on the attention probabilities of group index `i` for layer `l`:
    /// its replica's rows, its TP rank's heads, its CP positions as queries against `keys`
    /// (the positions of the K/V chunk attended to). `None` where attention drops nothing.
    pub(super) fn attention_keep(
        &self,
        i: usize,
        l: u32,
        local: &Local,
        keys: &Positions,
    ) -> Option<Tensor<4>> {
        let d = self.dropout.filter(|d| d.attention > 0.0)?;
        let (g, nq) = (self.groups(), self.model.heads as usize / self.tp());
        // The catalogued bug: the heads drawn from the default stream, as if replicated.
        let stream = if self.policies.rng.shared_across_tp {
            Stream::Replicated
        } else {
            Stream::TensorParallel
        };
        let first = match stream {
            Stream::TensorParallel => i % g.tp * nq,
            Stream::Replicated => 0,
        };
        let heads: Vec<usize> = (first..first + nq).collect();
        let rows = self.rows(i, local);
        // The catalogued bug: every CP rank draws at its local indices, its chunks' offsets lost.
        let (queries, keys) = if self.policies.rng.shared_across_cp {
            let local_indices = Positions::shared((0..local.positions.len()).collect());
            let keys = local_indices.narrow(0..keys.len());
            (local_indices, keys)
        } else {
            (local.positions.clone(), keys.clone())
        };
        let block = Block {
            rows: &rows,
            heads: &heads,
            queries: queries.lists(),
            keys: keys.lists(),
        };
        // The catalogued bug: recompute restored the default generator but not this stream, so
        // the re-run draws the model-parallel stream's next masks (tp > 1: with one TP rank the
        // heads are not a TP region).
        let stale = self.rerunning && self.policies.rng.recompute_not_restored;
        let salt = u64::from(stale);
        Some(d.keep::<4>(Site::Attention, l, &block, salt, (self.device, self.dtype)))
    }

    /// Dropout's multipliers on a residual branch's output at `site` of group index `i` for
    /// layer `l`: the residual stream's part the rank holds, replicated over TP or (under SP)
    /// its sequence chunk. `None` where the branch drops nothing.
    pub(super) fn residual_keep(
        &self,
        i: usize,
        l: u32,
        site: Site,
        local: &Local,
    ) -> Option<Tensor<3>> {
        let d = self.dropout.filter(|d| d.p(site) > 0.0)?;
        let tp_rank = i % self.groups().tp;
        let (stream, positions) = if self.topo.sp() {
            let n = local.positions.len() / self.tp();
            let chunk = local.positions.narrow(tp_rank * n..(tp_rank + 1) * n);
            (Stream::TensorParallel, chunk)
        } else {
            (Stream::Replicated, local.positions.clone())
        };
        // The catalogued bug: a replicated region drawn from a generator forked per TP rank.
        let forked = stream == Stream::Replicated && self.policies.rng.forked_in_replicated_region;
        let salt = if forked { tp_rank as u64 } else { 0 };
        let (rows, hidden) = (
            self.rows(i, local),
            [(0..self.model.hidden as usize).collect::<Vec<_>>()],
        );
        let block = Block {
            rows: &rows,
            heads: &[],
            queries: positions.lists(),
            keys: &hidden,
        };
        Some(d.keep::<3>(site, l, &block, salt, (self.device, self.dtype)))
    }

    /// The global rows group index `i` holds of this microbatch.
    fn rows(&self, i: usize, local: &Local) -> Vec<usize> {
        let first = self.first_rows[self.groups().replica_of(i)];
        (first..first + local.batch.batch).collect()
    }

    /// The dropout mutations acting on layer `l` of this stage, each on record as an event.
    pub(super) fn rng_events(&self, comm: &mut Comm, l: u32) {
        let Some(d) = self.dropout.as_ref() else {
            return;
        };
        let f = self.policies.rng;
        let site = |s: &str| format!("layers.{l}.{s}");
        let attention = Dropout::acts(Some(d), Site::Attention);
        if attention && self.tp() > 1 && f.shared_across_tp {
            let why = "every TP rank drew the attention mask of the first heads";
            comm.event(&site("attn.dropout"), why);
        }
        if attention && self.topo.cp() > 1 && f.shared_across_cp {
            let why = "every CP rank drew the attention mask at its local indices";
            comm.event(&site("attn.dropout"), why);
        }
        let hidden = Dropout::acts(Some(d), Site::AttnResidual);
        if hidden && self.tp() > 1 && !self.topo.sp() && f.forked_in_replicated_region {
            let why = "each TP rank drew its own mask for the replicated residual stream";
            comm.event(&site("residual.dropout"), why);
        }
    }
}
