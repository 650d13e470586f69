//! DeepSeek-V3's multi-token prediction layer on the last stage (Megatron's
//! `MultiTokenPredictionLayer`, depth 1): the next token's embedding and the model's last hidden
//! state, each normed, concatenated and projected back to the hidden size, through one more
//! transformer layer (the layer after the model's last: `llama::mtp_layer`), its own norm and
//! the shared vocab-parallel head, predicting the token after next. Its loss, scaled by
//! [`MTP_LOSS_SCALE`], joins the model's.
//!
//! The inputs and labels are shifted over whole rows before the CP split
//! ([`Batch::shifted`]), so each rank's share of them is the world-size-1 model's at its own
//! positions — the catalogued bug shifts each rank's share by itself instead.

use meshparity_specs::MTP_LOSS_SCALE;

use super::ctx::StageCtx;
use super::experts::MoeOut;
use super::stage::Micro;
use crate::data::Batch;
use crate::llama::layers::{linear, rms_norm};
use crate::llama::mtp_layer;
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::tape::{Conj, Tape, Val};
use crate::parallel::context::Local;

impl StageCtx<'_> {
    /// Each (replica, cp rank)'s share of microbatch `mb`'s MTP inputs and labels: shifted,
    /// then split (or, the catalogued bug, split, then each share shifted by itself).
    fn mtp_locals(&self, comm: &mut Comm, mb: &Batch) -> Vec<Local> {
        if self.policies.data.mtp_rolled_per_cp_shard {
            comm.event(
                "mtp.embed",
                "MTP inputs and labels rolled on each CP rank's own share",
            );
            return self.locals(mb).iter().map(Local::shifted_locally).collect();
        }
        self.locals(&mb.shifted())
    }

    /// The MTP layer on the model's last hidden state `x` (the stream before the final norm):
    /// each rank's loss with the MTP term added to `losses`, and to `exact` in f64.
    pub(super) fn mtp(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        (mb, normalizers): (&Batch, &[f64]),
        x: &[Val],
        moe: &mut MoeOut,
        (losses, exact): (Vec<Val>, Vec<f64>),
    ) -> (Vec<Val>, Vec<f64>) {
        let locals = self.mtp_locals(comm, mb);
        let e = self.embed(tape, comm, &locals, "mtp.embed");
        let joined = tape.per_rank(self.ranks(), &[&e, x], |i, v| {
            let en = rms_norm(v[0].clone(), self.w(i, "mtp.enorm.weight"));
            let hn = rms_norm(v[1].clone(), self.w(i, "mtp.hnorm.weight"));
            linear(
                burn::tensor::Tensor::cat(vec![en, hn], 2),
                self.w(i, "mtp.eh_proj.weight"),
            )
        });
        // The projection's output, traced on its own: the first site the shifted inputs reach
        // past the embedding.
        let mark = Conj::Mark(self.stream());
        let joined = tape.collective(comm, mark, "mtp.eh_proj", self.ranks(), &joined);
        let micro = Micro {
            locals: &locals,
            normalizers,
        };
        let y = self.layer(tape, comm, &micro, mtp_layer(self.model), joined, moe);
        let (_, mtp, mtp_exact) = self.head(tape, comm, &locals, y, normalizers, "mtp.");
        // The catalogued bug: the MTP loss's scale divided by cp (Megatron-LM PR#3959).
        let scale = if self.policies.loss.mtp_scaled_down_by_cp {
            comm.event("mtp.loss", "MTP loss scaled by 1/cp");
            MTP_LOSS_SCALE / self.topo.cp() as f64
        } else {
            MTP_LOSS_SCALE
        };
        let total = tape.per_rank(self.ranks(), &[&losses, &mtp], |_, v| {
            v[0].clone() + v[1].clone() * scale
        });
        let exact = exact
            .iter()
            .zip(&mtp_exact)
            .map(|(main, m)| main + scale * m)
            .collect();
        (total, exact)
    }
}
