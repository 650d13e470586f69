//! One transformer layer of a stage: the attention block and the MLP block, each a span that
//! activation recompute can re-run in backward (`comm/recompute.rs`): under `recompute =
//! "full"` both blocks of a dense layer (a moe layer's routed experts are kept: their routing
//! and auxiliary losses are the forward's), under `"selective"` the attention between its TP
//! collectives (its projections included, which Megatron's core-attention recompute leaves out).

use std::sync::atomic::Ordering::Relaxed;

use burn::tensor::Tensor;
use meshparity_specs::Recompute;

use super::ctx::{LayerFaults, StageCtx};
use super::experts::MoeOut;
use super::faulty;
use super::stage::Micro;
use crate::data::Batch;
use crate::dropout::Site;
use crate::llama::layers::rms_norm;
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::recompute::{Rerun, Span};
use crate::parallel::comm::tape::{Conj, Tape, Val};
use crate::parallel::context::Local;

impl StageCtx<'_> {
    /// Layer `l` on the residual stream `x`.
    pub(super) fn layer(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        micro: &Micro<'_>,
        l: u32,
        x: Vec<Val>,
        moe: &mut MoeOut,
    ) -> Vec<Val> {
        let f = self.faults(comm, l);
        let x = self.span(tape, comm, Span::Attention(l), &x, |tape, comm, x| {
            self.attention_block(tape, comm, micro, l, x, f)
        });
        if self.model.family.has_experts() {
            return self.moe_block(tape, comm, micro, l, &x, moe, f);
        }
        self.span(tape, comm, Span::Mlp(l), &x, |tape, comm, x| {
            self.mlp_block(tape, comm, micro, l, x, f)
        })
    }

    /// `span` run by `run`: on this tape, or on a tape of its own that backward runs again
    /// where the run recomputes it.
    fn span(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        span: Span,
        inputs: &[Val],
        run: impl Fn(&mut Tape, &mut Comm, &[Val]) -> Vec<Val>,
    ) -> Vec<Val> {
        let recomputed = matches!(
            (self.recompute, span),
            (Some(Recompute::Full), Span::Attention(_) | Span::Mlp(_))
                | (Some(Recompute::Selective), Span::CoreAttention(_))
        );
        if !recomputed {
            return run(tape, comm, inputs);
        }
        self.untracked.store(true, Relaxed);
        let outputs = tape.recomputed(span, inputs, |values| {
            Rerun::run(values, false, |sub, ins| run(sub, comm, ins))
        });
        self.untracked.store(false, Relaxed);
        outputs
    }

    /// Backward's re-run of `span` for microbatch `mb`: its forward again, untraced (the
    /// forward was), with the forward's faults but none of their events.
    pub fn rerun(
        &self,
        comm: &mut Comm,
        mb: &Batch,
        normalizers: &[f64],
        span: Span,
        values: Vec<Tensor<3>>,
    ) -> Rerun {
        let locals = self.locals(mb);
        let micro = Micro {
            locals: &locals,
            normalizers,
        };
        let l = span.layer();
        let f = self.layer_faults(l);
        if self.policies.rng.recompute_not_restored
            && self.dropout.is_some_and(|d| d.attention > 0.0)
        {
            let why = "recompute drew the attention mask from the unrestored model-parallel stream";
            comm.event(&format!("layers.{l}.attn.recompute"), why);
        }
        let tracing = comm.tracing();
        comm.set_tracing(false);
        let again = Rerun::run(values, true, |tape, ins| match span {
            Span::Attention(l) => self.attention_block(tape, comm, &micro, l, ins, f),
            Span::CoreAttention(l) => self.core_attention(tape, comm, &micro, l, ins, f),
            Span::Mlp(l) => self.mlp_block(tape, comm, &micro, l, ins, f),
        });
        comm.set_tracing(tracing);
        again
    }

    /// Norm, attention (the core a span of its own) and the residual add with its dropout.
    fn attention_block(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        micro: &Micro<'_>,
        l: u32,
        x: &[Val],
        f: LayerFaults,
    ) -> Vec<Val> {
        let name = |s: &str| format!("layers.{l}.{s}");
        let hn = tape.per_rank(self.ranks(), &[x], |i, v| {
            let w = self.w(i, &name("attn_norm.weight"));
            match f.norm {
                Some(nf) if self.group.ranks[i] == self.topo.odd_rank() => {
                    faulty::rms_norm(v[0].clone(), w, nf)
                }
                _ => rms_norm(v[0].clone(), w),
            }
        });
        let hn = tape.collective(comm, self.enter(), &name("attn.in"), self.ranks(), &hn);
        let part = self.span(tape, comm, Span::CoreAttention(l), &hn, |tape, comm, hn| {
            self.core_attention(tape, comm, micro, l, hn, f)
        });
        let o = tape.collective(comm, self.leave(), &name("attn.o"), self.ranks(), &part);
        tape.per_rank(self.ranks(), &[x, &o], |i, v| {
            let o = self.dropped(i, l, Site::AttnResidual, micro.locals, v[1].clone());
            match f.residual {
                Some(scale) => v[0].clone() + o * scale,
                None => v[0].clone() + o,
            }
        })
    }

    /// Attention between the block's collectives: on each rank's sequence, or around the CP
    /// ring.
    fn core_attention(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        micro: &Micro<'_>,
        l: u32,
        hn: &[Val],
        f: LayerFaults,
    ) -> Vec<Val> {
        if self.topo.cp() > 1 {
            self.ring_attention(tape, comm, micro.locals, l, hn, f)
        } else {
            self.local_attention(tape, micro.locals, l, hn, f)
        }
    }

    /// Norm, the dense TP MLP and the residual add with its dropout.
    fn mlp_block(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        micro: &Micro<'_>,
        l: u32,
        x: &[Val],
        f: LayerFaults,
    ) -> Vec<Val> {
        let hn = tape.per_rank(self.ranks(), &[x], |i, v| {
            rms_norm(
                v[0].clone(),
                self.w(i, &format!("layers.{l}.mlp_norm.weight")),
            )
        });
        let d = self.tp_mlp(tape, comm, l, "mlp", &hn, f);
        let out = tape.per_rank(self.ranks(), &[x, &d], |i, v| {
            v[0].clone() + self.dropped(i, l, Site::MlpResidual, micro.locals, v[1].clone())
        });
        self.trace_stream(comm, tape, &format!("layers.{l}.out"), &out);
        out
    }

    /// Norm, the routed experts (and the shared expert) and the residual add with its dropout.
    #[allow(clippy::too_many_arguments)]
    fn moe_block(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        micro: &Micro<'_>,
        l: u32,
        x: &[Val],
        moe: &mut MoeOut,
        f: LayerFaults,
    ) -> Vec<Val> {
        let name = |s: &str| format!("layers.{l}.{s}");
        let hn = tape.per_rank(self.ranks(), &[x], |i, v| {
            rms_norm(v[0].clone(), self.w(i, &name("mlp_norm.weight")))
        });
        let stream = Conj::Mark(self.stream());
        let at = tape.collective(comm, stream, &name("mlp.experts"), self.ranks(), &hn);
        let y = self.moe_mlp(tape, comm, micro.locals, l, &at, micro.normalizers, moe, f);
        // The experts' combined output, traced on its own (the residual would dilute it).
        let y = tape.collective(comm, stream, &name("mlp.combine"), self.ranks(), &y);
        let y = match self.model.moe.shared_expert_ffn {
            Some(_) => {
                let shared = self.tp_mlp(tape, comm, l, "mlp.shared_expert", &hn, f);
                tape.per_rank(self.ranks(), &[&y, &shared], |_, v| {
                    v[0].clone() + v[1].clone()
                })
            }
            None => y,
        };
        let out = tape.per_rank(self.ranks(), &[x, &y], |i, v| {
            v[0].clone() + self.dropped(i, l, Site::MlpResidual, micro.locals, v[1].clone())
        });
        self.trace_stream(comm, tape, &name("out"), &out);
        out
    }

    /// A residual branch's output `t` of group index `i` after dropout at `site`.
    fn dropped(&self, i: usize, l: u32, site: Site, locals: &[Local], t: Tensor<3>) -> Tensor<3> {
        match self.residual_keep(i, l, site, &locals[self.groups().local_of(i)]) {
            Some(keep) => t * keep,
            None => t,
        }
    }
}
