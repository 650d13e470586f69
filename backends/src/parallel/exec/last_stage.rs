//! What the last pipeline stage hands back for a microbatch: each replica's loss and its
//! logits put back together, whether the ranks of a TP group agreed on the loss, and the scale
//! the loss enters backward at.

use std::ops::Range;

use burn::tensor::Tensor;

use super::{scalar, MeshExec};
use crate::parallel::comm::collective::Comm;
use crate::parallel::context::restore;
use crate::parallel::layers::stage::StageOut;

impl MeshExec<'_> {
    /// Each replica's microbatch loss (the cp ranks' partial sums added, as the loss report's
    /// all-reduce over cp does) and its logits, vocab blocks joined and cp chunks put back in
    /// sequence order (a padded vocabulary's padding cut off).
    pub(super) fn gather_last(
        &self,
        comm: &Comm,
        out: &StageOut,
        replicas: usize,
    ) -> Vec<(f64, Tensor<3>)> {
        let cp = self.topo.cp();
        let tp_groups = self.topo.layout(replicas).tp_groups();
        tp_groups
            .chunks(cp)
            .enumerate()
            .map(|(d, replica)| {
                let loss = replica
                    .iter()
                    .map(|g| scalar(out.tape.value(out.outputs[g[0]]).reshape([1])))
                    .sum();
                // A padded vocabulary's blocks run past it: the padding is cut off.
                let vocab = self.model.vocab as usize;
                let per_cp = replica
                    .iter()
                    .map(|g| {
                        Tensor::cat(
                            g.iter().map(|&i| out.tape.value(out.logits[i])).collect(),
                            2,
                        )
                        .narrow(2, 0, vocab)
                    })
                    .collect();
                (loss, restore(per_cp, comm.order(d)))
            })
            .collect()
    }

    /// Where the TP ranks of a replica's last stage computed different losses for microbatch
    /// `mb`: each computes its loss from the same all-reduced sums (max, Σ exp, target logit,
    /// Σ z), so a correct mesh agrees to the bit, and a loss term taken from a rank's own shard
    /// (label smoothing over the local vocabulary, Megatron-LM#737) shows here whatever its
    /// size.
    pub(super) fn losses_disagree(
        &self,
        out: &StageOut,
        ds: &Range<usize>,
        mb: usize,
    ) -> Option<String> {
        let tp_groups = self.topo.layout(ds.len()).tp_groups();
        tp_groups.iter().find_map(|g| {
            let loss = |i: usize| out.rank_losses[g[i]];
            let first = loss(0);
            (1..g.len()).map(|i| (i, loss(i))).find_map(|(i, other)| {
                (other.to_bits() != first.to_bits()).then(|| {
                    format!(
                        "`loss`: microbatch {mb}'s loss is {other} on TP rank {i} and {first} on \
                         TP rank 0 of the same group: the ranks of a TP group compute different \
                         losses"
                    )
                })
            })
        })
    }

    /// The loss's backward scale on each rank: 1 (each CP rank's loss is its tokens' share of
    /// the global normalizer already), or (the catalogued bug, verl PR#4250's second) cp, as
    /// when a CP loss scale is applied once too often.
    pub(super) fn loss_backward_scale(&self, comm: &mut Comm) -> f64 {
        let cp = self.topo.cp();
        if comm.policies().loss.scales_loss_grad_by_cp {
            comm.event("loss.bwd", "loss gradient scaled by cp");
            cp as f64
        } else {
            1.0
        }
    }
}
