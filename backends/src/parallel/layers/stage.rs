//! One pipeline stage of the `llama` model on one data-parallel replica's TP × CP ranks, for one
//! microbatch.
//!
//! The same layer functions as the oracle (`llama::layers`), called with each rank's shards,
//! and every collective explicit on the tape: vocab-parallel embedding, column-parallel q/k/v and
//! gate/up, row-parallel o and down, sequence-parallel norms and residuals (all-gather before
//! and reduce-scatter after each TP region); the head is `head.rs`. Under context
//! parallelism each TP group holds its cp rank's chunks of the sequence ([`Local`]) and
//! attention runs around the ring (`ring.rs`).

use burn::tensor::{Int, Tensor, TensorData};

use super::ctx::{LayerFaults, StageCtx};
use super::experts::MoeOut;
use super::faulty;
use crate::data::Batch;
use crate::llama::layers::swiglu;
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::tape::{Conj, Tape, Val};
use crate::parallel::comm::trace::Canon;
use crate::parallel::context::Local;

/// What a stage produced for one microbatch.
pub struct StageOut {
    pub tape: Tape,
    /// Values that came in from the previous stage (per TP rank), empty on the first stage.
    pub inputs: Vec<Val>,
    /// Activation per TP rank (not the last stage) or loss per TP rank (the last stage).
    pub outputs: Vec<Val>,
    /// Vocab-parallel logits per TP rank (the last stage only).
    pub logits: Vec<Val>,
    /// The moe family's auxiliary losses and routing (empty for dense models).
    pub moe: MoeOut,
    /// The last stage's loss per TP rank in f64, from the terms each rank holds (empty on
    /// other stages): what a TP group must agree on, at a precision that does not round a
    /// difference away.
    pub rank_losses: Vec<f64>,
}

/// One microbatch as the layers see it: each cp rank's share and loss normalizer.
pub(super) struct Micro<'a> {
    pub(super) locals: &'a [Local],
    pub(super) normalizers: &'a [f64],
}

impl StageCtx<'_> {
    /// The layers of this stage (a virtual stage's under the interleaved schedule). The
    /// catalogued bug: the rank's chunks taken in reverse order, chunk c running the layers of
    /// chunk v−1−c (the same rank holds them, so nothing is missing; with one chunk, a no-op).
    fn layers(&self) -> std::ops::Range<u32> {
        let t = self.topo;
        let per = self.model.layers / t.stages() as u32;
        let mut stage = self.group.stage;
        if self.policies.data.chunks_reversed {
            let chunk = stage / t.pp();
            stage = (t.chunks() - 1 - chunk) * t.pp() + self.group.pp;
        }
        let stage = stage as u32;
        stage * per..(stage + 1) * per
    }

    /// The canonical form of the residual stream (replicated, or sequence shards under SP).
    pub(super) fn stream(&self) -> Canon {
        if self.topo.sp() {
            Canon::Cat(1)
        } else {
            Canon::Copies
        }
    }

    /// Trace the residual stream `x` at `site`.
    pub fn trace_stream(&self, comm: &mut Comm, tape: &Tape, site: &str, x: &[Val]) {
        if comm.tracing() {
            let parts: Vec<Tensor<3>> = x.iter().map(|&v| tape.value(v)).collect();
            comm.trace(site, &parts, self.stream());
        }
    }

    /// Conjugate pair entering a TP region (`f` or SP all-gather) and leaving it (`g` or SP
    /// reduce-scatter).
    pub(super) fn enter(&self) -> Conj {
        if self.topo.sp() {
            Conj::GatherFromSp(1)
        } else {
            Conj::CopyToTp
        }
    }

    pub(super) fn leave(&self) -> Conj {
        if self.topo.sp() {
            Conj::ScatterToSp(1)
        } else {
            Conj::ReduceFromTp
        }
    }

    /// Each (replica, cp rank)'s share of the microbatch `mb` (the catalogued bug: labels
    /// rolled on each CP rank's own tokens).
    pub(super) fn locals(&self, mb: &Batch) -> Vec<Local> {
        let (cp, replicas) = (self.topo.cp(), self.group.layout.replicas);
        let mut locals = Local::split(mb, cp, replicas);
        // The catalogued bug: padded documents cut by the row-level split, the positions the
        // per-document layout's.
        if mb.padded_documents && self.policies.data.thd_split_by_rows {
            let rowwise = Batch {
                padded_documents: false,
                ..mb.clone()
            };
            for (local, by_row) in locals.iter_mut().zip(Local::split(&rowwise, cp, replicas)) {
                local.batch.tokens = by_row.batch.tokens;
                local.batch.targets = by_row.batch.targets;
            }
        }
        if self.policies.data.rolls_labels_per_cp_shard {
            locals.iter_mut().for_each(Local::roll_targets_locally);
        }
        locals
    }

    /// Forward of this stage. `input` holds the received activations (not on stage 0);
    /// `normalizers` the token count each cp rank's loss is divided by.
    pub fn forward(
        &self,
        comm: &mut Comm,
        mb: &Batch,
        input: Vec<Tensor<3>>,
        normalizers: &[f64],
    ) -> StageOut {
        let mut tape = Tape::new();
        let locals = self.locals(mb);
        if self.policies.data.rolls_labels_per_cp_shard {
            comm.event("loss.labels", "labels rolled on each CP rank's own tokens");
        }
        if mb.padded_documents && self.policies.data.thd_split_by_rows {
            let why = "each CP rank cut the padded documents by rows, its positions per document";
            comm.event("data.cp.split", why);
        }
        let inputs: Vec<Val> = input.into_iter().map(|t| tape.input(t)).collect();
        let mut x = if self.group.stage == 0 {
            self.embed(&mut tape, comm, &locals, "embed")
        } else {
            inputs.clone()
        };
        let mut moe = MoeOut::default();
        if self.policies.data.chunks_reversed {
            let site = format!("pp.stage{}.layers", self.group.stage);
            comm.event(&site, "ran another model chunk's layers");
        }
        for l in self.layers() {
            let micro = Micro {
                locals: &locals,
                normalizers,
            };
            x = self.layer(&mut tape, comm, &micro, l, x, &mut moe);
        }
        if self.group.stage + 1 < self.topo.stages() {
            return StageOut {
                tape,
                inputs,
                outputs: x,
                logits: Vec::new(),
                moe,
                rank_losses: Vec::new(),
            };
        }
        let (logits, loss, rank_losses) =
            self.head(&mut tape, comm, &locals, x.clone(), normalizers, "");
        let (loss, rank_losses) = if self.model.mtp() {
            let main = (loss, rank_losses);
            self.mtp(&mut tape, comm, (mb, normalizers), &x, &mut moe, main)
        } else {
            (loss, rank_losses)
        };
        StageOut {
            tape,
            inputs,
            outputs: loss,
            logits,
            moe,
            rank_losses,
        }
    }

    /// Vocab-parallel embedding: each rank looks up the tokens in its vocabulary block (zeros
    /// elsewhere); the partial embeddings are reduced (or reduce-scattered under SP) at `site`
    /// (`embed`, or `mtp.embed` for the MTP layer's next tokens).
    pub(super) fn embed(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        locals: &[Local],
        site: &str,
    ) -> Vec<Val> {
        let h = self.model.hidden as usize;
        let (g, block) = (self.groups(), self.vocab_block());
        let parts = tape.per_rank(self.ranks(), &[], |i, _| {
            let mb = &locals[g.local_of(i)].batch;
            let (b, s) = (mb.batch, mb.seq_len);
            let start = (i % g.tp * block) as i64;
            let local: Vec<i64> = mb
                .tokens
                .iter()
                .map(|&t| (t - start).clamp(0, block as i64 - 1))
                .collect();
            let keep: Vec<f64> = mb
                .tokens
                .iter()
                .map(|&t| f64::from(u8::from((start..start + block as i64).contains(&t))))
                .collect();
            let idx = Tensor::<1, Int>::from_data(TensorData::new(local, [b * s]), self.device);
            let rows = self.w(i, "embed.weight").select(0, idx);
            (rows * self.constant(keep, [b * s, 1])).reshape([b, s, h])
        });
        tape.collective(comm, self.leave(), site, self.ranks(), &parts)
    }

    /// A tensor-parallel SwiGLU MLP (`PREFIX.gate/up/down.weight`: column-parallel gate and up,
    /// row-parallel down) on the stream `hn`: the dense model's MLP, and the moe family's shared
    /// expert (Megatron shards both over TP). Sites `PREFIX.in` and `PREFIX.down`.
    pub(super) fn tp_mlp(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        l: u32,
        prefix: &str,
        hn: &[Val],
        f: LayerFaults,
    ) -> Vec<Val> {
        let name = |s: &str| format!("layers.{l}.{prefix}.{s}");
        let hn = tape.collective(comm, self.enter(), &name("in"), self.ranks(), hn);
        // The dense MLP's partial output on the odd rank, where a corruption is injected.
        let noise = f.activation_noise.filter(|_| prefix == "mlp");
        let part = tape.per_rank(self.ranks(), &[&hn], |i, v| {
            let mlp = if f.swiglu_wrong_operand {
                faulty::swiglu_wrong_operand
            } else {
                swiglu
            };
            let out = mlp(
                v[0].clone(),
                self.w(i, &name("gate.weight")),
                self.w(i, &name("up.weight")),
                self.w(i, &name("down.weight")),
            );
            match noise {
                Some(eps) if self.group.ranks[i] == self.topo.odd_rank() => {
                    faulty::corrupted(out, eps, &name("down"))
                }
                _ => out,
            }
        });
        tape.collective(comm, self.leave(), &name("down"), self.ranks(), &part)
    }

    /// The computation faults that hit layer `l` on this group, each on record as an event.
    pub(super) fn faults(&self, comm: &mut Comm, l: u32) -> LayerFaults {
        let f = self.layer_faults(l);
        self.rng_events(comm, l);
        let site = |s: &str| format!("layers.{l}.{s}");
        if f.norm.is_some() {
            comm.event(&site("attn_norm"), "computed wrongly on one rank");
        }
        if f.residual.is_some() {
            comm.event(&site("attn.residual"), "scaled on every rank");
        }
        if f.swiglu_wrong_operand {
            comm.event(&site("mlp.swiglu.bwd"), "wrong operand");
        }
        if f.activation_noise.is_some() {
            comm.event(
                &site("mlp.down"),
                "one TP rank's partial output corrupted by noise",
            );
        }
        if f.rope_swapped {
            comm.event(&site("attn.rope.bwd"), "outputs swapped");
        }
        if f.unweighted_merge {
            comm.event(
                &site("attn.ring.merge"),
                "blocks summed without log-sum-exp weights",
            );
        }
        if f.stale_kv_backward {
            comm.event(
                &site("attn.ring.bwd"),
                "every ring step's gradients computed against the rank's own K/V chunk",
            );
        }
        f
    }

    /// The computation faults that hit layer `l` on this group (no events: a recompute's
    /// re-run asks again).
    pub(super) fn layer_faults(&self, l: u32) -> LayerFaults {
        let (layer, data) = (self.policies.layers.at(l), self.policies.data);
        let odd_rank_here = self.group.ranks.contains(&self.topo.odd_rank());
        let cp = self.topo.cp() > 1;
        LayerFaults {
            norm: layer.norm.filter(|_| odd_rank_here),
            residual: layer.residual,
            swiglu_wrong_operand: layer.swiglu_wrong_operand,
            rope_swapped: layer.rope_swapped,
            unweighted_merge: cp && layer.unweighted_merge,
            stale_kv_backward: cp && layer.stale_kv_backward,
            positions_from_chunks: data.positions_from_chunks,
            unpadded_boundaries: data.unpadded_boundaries,
            // One TP rank's share: a no-op without tensor parallelism.
            activation_noise: layer
                .activation_noise
                .filter(|_| self.topo.tp() > 1 && odd_rank_here),
        }
    }
}
