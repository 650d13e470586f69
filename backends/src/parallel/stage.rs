//! One pipeline stage of the `llama` model on one tensor-parallel group, for one microbatch.
//!
//! The same layer functions as the oracle (`llama::layers`), called with each rank's shards,
//! and every collective explicit on the tape: vocab-parallel embedding, column-parallel q/k/v and
//! gate/up, row-parallel o and down, sequence-parallel norms and residuals (all-gather before
//! and reduce-scatter after each TP region), vocab-parallel cross-entropy.

use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use indexmap::IndexMap;
use meshparity_specs::ModelConfig;

use super::collective::Comm;
use super::fault::Fault;
use super::faulty;
use super::tape::{Conj, Tape, Val};
use super::trace::Canon;
use crate::data::{Batch, IGNORE};
use crate::llama::layers::{attention, attention_mask, rms_norm, rope, swiglu};

/// A rank's parameter shards as autodiff leaves.
pub type Leaves = IndexMap<String, Tensor<2>>;

/// What a stage needs to know about itself.
pub struct StageCtx<'a> {
    pub model: &'a ModelConfig,
    pub device: &'a Device,
    pub dtype: DType,
    pub stage: usize,
    pub stages: usize,
    /// Global ranks of this stage's TP group, TP index order.
    pub ranks: Vec<usize>,
    pub sp: bool,
    /// Every rank's leaves, indexed by global rank.
    pub leaves: &'a [Leaves],
    pub fault: Option<Fault>,
    /// The global rank a single-rank computation fault hits (the last rank computing the first
    /// layer).
    pub odd_rank: usize,
}

/// What a stage produced for one microbatch.
pub struct StageOut {
    pub tape: Tape,
    /// Values that came in from the previous stage (per TP rank), empty on the first stage.
    pub inputs: Vec<Val>,
    /// Activation per TP rank (not the last stage) or loss per TP rank (the last stage).
    pub outputs: Vec<Val>,
    /// Vocab-parallel logits per TP rank (the last stage only).
    pub logits: Vec<Val>,
}

/// Which computation faults act in one layer.
#[derive(Clone, Copy, Default)]
struct LayerFaults {
    norm: Option<super::fault::NormFault>,
    residual: Option<f64>,
    swiglu_wrong_operand: bool,
    rope_swapped: bool,
}

impl StageCtx<'_> {
    fn tp(&self) -> usize {
        self.ranks.len()
    }

    fn w(&self, i: usize, name: &str) -> Tensor<2> {
        self.leaves[self.ranks[i]][name].clone()
    }

    fn layers(&self) -> std::ops::Range<u32> {
        let per = self.model.layers / self.stages as u32;
        self.stage as u32 * per..(self.stage as u32 + 1) * per
    }

    fn constant<const D: usize>(&self, v: Vec<f64>, shape: [usize; D]) -> Tensor<D> {
        Tensor::<D>::from_data(TensorData::new(v, shape), (self.device, self.dtype))
    }

    /// The canonical form of the residual stream (replicated, or sequence shards under SP).
    fn stream(&self) -> Canon {
        if self.sp {
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
    fn enter(&self) -> Conj {
        if self.sp {
            Conj::GatherFromSp(1)
        } else {
            Conj::CopyToTp
        }
    }

    fn leave(&self) -> Conj {
        if self.sp {
            Conj::ScatterToSp(1)
        } else {
            Conj::ReduceFromTp
        }
    }

    /// Forward of this stage. `input` holds the received activations (not on stage 0);
    /// `normalizer` is the token count the loss is divided by.
    pub fn forward(
        &self,
        comm: &mut Comm,
        mb: &Batch,
        input: Vec<Tensor<3>>,
        normalizer: f64,
    ) -> StageOut {
        let mut tape = Tape::new();
        let inputs: Vec<Val> = input.into_iter().map(|t| tape.input(t)).collect();
        let mut x = if self.stage == 0 {
            self.embed(&mut tape, comm, mb)
        } else {
            inputs.clone()
        };
        for l in self.layers() {
            x = self.layer(&mut tape, comm, mb, l, x);
        }
        if self.stage + 1 < self.stages {
            return StageOut {
                tape,
                inputs,
                outputs: x,
                logits: Vec::new(),
            };
        }
        let (logits, loss) = self.head(&mut tape, comm, mb, x, normalizer);
        StageOut {
            tape,
            inputs,
            outputs: loss,
            logits,
        }
    }

    /// Vocab-parallel embedding: each rank looks up the tokens in its vocabulary block (zeros
    /// elsewhere); the partial embeddings are reduced (or reduce-scattered under SP).
    fn embed(&self, tape: &mut Tape, comm: &mut Comm, mb: &Batch) -> Vec<Val> {
        let (b, s) = (mb.batch, mb.seq_len);
        let h = self.model.hidden as usize;
        let block = self.model.vocab as usize / self.tp();
        let parts = tape.per_rank(&self.ranks, &[], |i, _| {
            let start = (i * block) as i64;
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
        tape.collective(comm, self.leave(), "embed", &self.ranks, &parts)
    }

    fn layer(&self, tape: &mut Tape, comm: &mut Comm, mb: &Batch, l: u32, x: Vec<Val>) -> Vec<Val> {
        let name = |s: &str| format!("layers.{l}.{s}");
        let (b, s) = (mb.batch, mb.seq_len);
        let hd = (self.model.hidden / self.model.heads) as usize;
        let nq = self.model.heads as usize / self.tp();
        let nkv = self.model.kv_heads as usize / self.tp();
        let mask = attention_mask(&mb.lengths, s, self.device);
        let f = self.faults(comm, l);

        // Attention block.
        let hn = tape.per_rank(&self.ranks, &[&x], |i, v| {
            let w = self.w(i, &name("attn_norm.weight"));
            match f.norm {
                Some(nf) if self.ranks[i] == self.odd_rank => faulty::rms_norm(v[0].clone(), w, nf),
                _ => rms_norm(v[0].clone(), w),
            }
        });
        let hn = tape.collective(comm, self.enter(), &name("attn.in"), &self.ranks, &hn);
        let part = tape.per_rank(&self.ranks, &[&hn], |i, v| {
            let h = v[0].clone();
            let heads = |t: Tensor<3>, n: usize| t.reshape([b, s, n, hd]).swap_dims(1, 2);
            let q = heads(
                h.clone()
                    .matmul(self.w(i, &name("attn.q.weight")).unsqueeze()),
                nq,
            );
            let k = heads(
                h.clone()
                    .matmul(self.w(i, &name("attn.k.weight")).unsqueeze()),
                nkv,
            );
            let v = heads(h.matmul(self.w(i, &name("attn.v.weight")).unsqueeze()), nkv);
            let rot = |t: Tensor<4>| {
                if f.rope_swapped {
                    faulty::rope_swapped_backward(t, 0)
                } else {
                    rope(t, 0)
                }
            };
            let a = attention(rot(q), rot(k), v, mask.clone());
            let a: Tensor<3> = a.swap_dims(1, 2).reshape([b, s, nq * hd]);
            a.matmul(self.w(i, &name("attn.o.weight")).unsqueeze())
        });
        let o = tape.collective(comm, self.leave(), &name("attn.o"), &self.ranks, &part);
        let x = tape.per_rank(&self.ranks, &[&x, &o], |_, v| match f.residual {
            Some(scale) => v[0].clone() + v[1].clone() * scale,
            None => v[0].clone() + v[1].clone(),
        });

        // MLP block.
        let hn = tape.per_rank(&self.ranks, &[&x], |i, v| {
            rms_norm(v[0].clone(), self.w(i, &name("mlp_norm.weight")))
        });
        let hn = tape.collective(comm, self.enter(), &name("mlp.in"), &self.ranks, &hn);
        let part = tape.per_rank(&self.ranks, &[&hn], |i, v| {
            let mlp = if f.swiglu_wrong_operand {
                faulty::swiglu_wrong_operand
            } else {
                swiglu
            };
            mlp(
                v[0].clone(),
                self.w(i, &name("mlp.gate.weight")),
                self.w(i, &name("mlp.up.weight")),
                self.w(i, &name("mlp.down.weight")),
            )
        });
        let d = tape.collective(comm, self.leave(), &name("mlp.down"), &self.ranks, &part);
        let out = tape.per_rank(&self.ranks, &[&x, &d], |_, v| v[0].clone() + v[1].clone());
        self.trace_stream(comm, tape, &name("out"), &out);
        out
    }

    /// The computation faults that hit layer `l` on this group, each on record as an event.
    fn faults(&self, comm: &mut Comm, l: u32) -> LayerFaults {
        let Some(fault) = self.fault else {
            return LayerFaults::default();
        };
        let f = LayerFaults {
            norm: fault
                .norm(l)
                .filter(|_| self.ranks.contains(&self.odd_rank)),
            residual: fault.residual_scale(l),
            swiglu_wrong_operand: fault.swiglu_wrong_operand(l),
            rope_swapped: fault.rope_swapped(l),
        };
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
        if f.rope_swapped {
            comm.event(&site("attn.rope.bwd"), "outputs swapped");
        }
        f
    }

    /// Final norm, vocab-parallel output projection and vocab-parallel cross-entropy (Megatron's:
    /// all-reduce of the max, of Σ exp and of the target logit). Returns (logits, loss) per rank.
    fn head(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        mb: &Batch,
        x: Vec<Val>,
        normalizer: f64,
    ) -> (Vec<Val>, Vec<Val>) {
        let (b, s) = (mb.batch, mb.seq_len);
        let block = self.model.vocab as usize / self.tp();
        let hn = tape.per_rank(&self.ranks, &[&x], |i, v| {
            rms_norm(v[0].clone(), self.w(i, "norm.weight"))
        });
        let hn = tape.collective(comm, self.enter(), "output.in", &self.ranks, &hn);
        let logits = tape.per_rank(&self.ranks, &[&hn], |i, v| {
            v[0].clone().matmul(self.w(i, "output.weight").unsqueeze())
        });
        let maxes: Vec<Tensor<3>> = logits.iter().map(|&v| tape.value(v).max_dim(2)).collect();
        let shift = comm.all_reduce_max("loss.max.fwd.all_reduce_max", &self.ranks, maxes);
        let sumexp = tape.per_rank(&self.ranks, &[&logits], |i, v| {
            (v[0].clone() - shift[i].clone()).exp().sum_dim(2)
        });
        let picked = tape.per_rank(&self.ranks, &[&logits], |i, v| {
            let start = (i * block) as i64;
            let local: Vec<i64> = mb
                .targets
                .iter()
                .map(|&t| (t - start).clamp(0, block as i64 - 1))
                .collect();
            let keep: Vec<f64> = mb
                .targets
                .iter()
                .map(|&t| {
                    f64::from(u8::from(
                        t != IGNORE && (start..start + block as i64).contains(&t),
                    ))
                })
                .collect();
            let idx = Tensor::<2, Int>::from_data(TensorData::new(local, [b * s, 1]), self.device);
            let z = (v[0].clone() - shift[i].clone()).reshape([b * s, block]);
            (z.gather(1, idx) * self.constant(keep, [b * s, 1])).reshape([b, s, 1])
        });
        let sumexp = tape.collective(
            comm,
            Conj::ReduceFromTp,
            "loss.sumexp",
            &self.ranks,
            &sumexp,
        );
        let picked = tape.collective(
            comm,
            Conj::ReduceFromTp,
            "loss.target",
            &self.ranks,
            &picked,
        );
        let keep: Vec<f64> = mb
            .targets
            .iter()
            .map(|&t| f64::from(u8::from(t != IGNORE)))
            .collect();
        let keep = self.constant(keep, [b, s, 1]);
        let loss = tape.per_rank(&self.ranks, &[&sumexp, &picked], |_, v| {
            let ce = v[0].clone().log() - v[1].clone();
            ((ce * keep.clone()).sum() / normalizer).reshape([1, 1, 1])
        });
        (logits, loss)
    }
}
