//! Megatron's conjugate pairs: what each collective of the tape does forward and, on the
//! gradients, backward, and the canonical forms in which its values are traced.

use burn::tensor::Tensor;

use super::collective::Comm;
use super::trace::Canon;
use crate::parallel::topology::Layout;

/// Megatron's conjugate pairs: what a collective does forward and backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conj {
    /// `f`: identity forward, all-reduce of gradients backward (input of column-parallel
    /// layers computed redundantly on every TP rank).
    CopyToTp,
    /// `g`: all-reduce forward, identity backward (output of row-parallel layers, vocab-parallel
    /// embedding and cross-entropy partial sums).
    ReduceFromTp,
    /// Sequence parallelism: all-gather forward along `dim`, reduce-scatter backward.
    GatherFromSp(usize),
    /// Sequence parallelism: reduce-scatter forward along `dim`, all-gather backward.
    ScatterToSp(usize),
    /// Megatron's `gather_from_tensor_model_parallel_region`: all-gather forward along `dim`,
    /// each rank keeping its own block of its own gradient backward (no reduction). Only a
    /// catalogued bug uses it (logits gathered before a vocab-parallel loss); not traced, as a
    /// world-size-1 run has nothing like it.
    GatherFromTp(usize),
    /// Context parallelism: one step around each CP ring forward (rank c gets rank c−1's
    /// value), the reverse step backward (a gradient returns to the rank that sent the value).
    /// Not traced: a world-size-1 run has nothing like it.
    Ring,
    /// No communication: a traced point (values forward, gradients backward, in this canonical
    /// form) where a block has no collective of its own to be traced at, e.g. the MoE MLP's
    /// input.
    Mark(Canon),
}

/// What a collective does forward, on each of its groups.
pub(super) fn forward(
    comm: &mut Comm,
    conj: Conj,
    site: &str,
    ranks: &[usize],
    groups: Layout,
    parts: Vec<Tensor<3>>,
) -> Vec<Tensor<3>> {
    if conj == Conj::Ring {
        let site = format!("{site}.fwd.send_recv");
        return Layout::each(&groups.cp_rings(), ranks, parts, |r, p| {
            comm.ring_shift(&site, r, p, false)
        });
    }
    Layout::each(&groups.tp_groups(), ranks, parts, |r, p| match conj {
        Conj::CopyToTp | Conj::Ring | Conj::Mark(_) => p,
        Conj::ReduceFromTp => comm.all_reduce_sum(&format!("{site}.fwd.all_reduce"), r, p),
        Conj::GatherFromSp(d) | Conj::GatherFromTp(d) => {
            comm.all_gather(&format!("{site}.fwd.all_gather"), r, p, d)
        }
        Conj::ScatterToSp(d) => comm.reduce_scatter(&format!("{site}.fwd.reduce_scatter"), r, p, d),
    })
}

/// The conjugate: what the collective does to gradients, on each of its groups.
pub(super) fn backward(
    comm: &mut Comm,
    conj: Conj,
    site: &str,
    ranks: &[usize],
    groups: Layout,
    upstream: Vec<Tensor<3>>,
) -> Vec<Tensor<3>> {
    if conj == Conj::Ring {
        let site = format!("{site}.bwd.send_recv");
        return Layout::each(&groups.cp_rings(), ranks, upstream, |r, g| {
            comm.ring_shift(&site, r, g, true)
        });
    }
    Layout::each(&groups.tp_groups(), ranks, upstream, |r, g| match conj {
        Conj::CopyToTp => comm.all_reduce_sum(&format!("{site}.bwd.all_reduce"), r, g),
        Conj::ReduceFromTp | Conj::Ring | Conj::Mark(_) => g,
        Conj::GatherFromSp(d) => {
            comm.reduce_scatter(&format!("{site}.bwd.reduce_scatter"), r, g, d)
        }
        Conj::ScatterToSp(d) => comm.all_gather(&format!("{site}.bwd.all_gather"), r, g, d),
        Conj::GatherFromTp(d) => {
            let block = g[0].dims()[d] / g.len();
            g.into_iter()
                .enumerate()
                .map(|(i, t)| t.narrow(d, i * block, block))
                .collect()
        }
    })
}

impl Conj {
    /// Whether its inputs are traced, and its outputs too (a mark's are the same values).
    pub(super) fn traced(self) -> (bool, bool) {
        match self {
            Conj::Ring | Conj::GatherFromTp(_) => (false, false),
            Conj::Mark(_) => (true, false),
            _ => (true, true),
        }
    }

    /// Canonical form of the collective's inputs.
    pub(super) fn canon_in(self) -> Canon {
        match self {
            Conj::CopyToTp => Canon::Copies,
            Conj::GatherFromSp(d) | Conj::GatherFromTp(d) => Canon::Cat(d),
            Conj::ReduceFromTp | Conj::ScatterToSp(_) => Canon::Sum,
            Conj::Ring => Canon::Copies,
            Conj::Mark(c) => c,
        }
    }

    /// Canonical form of its outputs.
    pub(super) fn canon_out(self) -> Canon {
        match self {
            Conj::ScatterToSp(d) => Canon::Cat(d),
            Conj::Mark(c) => c,
            _ => Canon::Copies,
        }
    }

    /// Canonical form of the gradients of its outputs: partial where the outputs fed a
    /// column-parallel computation (`f`, SP all-gather).
    pub(super) fn canon_grad_out(self) -> Canon {
        match self {
            Conj::CopyToTp | Conj::GatherFromSp(_) => Canon::Sum,
            Conj::ReduceFromTp | Conj::Ring | Conj::GatherFromTp(_) => Canon::Copies,
            Conj::ScatterToSp(d) => Canon::Cat(d),
            Conj::Mark(c) => c,
        }
    }

    /// Canonical form of the gradients of its inputs (after the conjugate).
    pub(super) fn canon_grad_in(self) -> Canon {
        match self {
            Conj::GatherFromSp(d) | Conj::GatherFromTp(d) => Canon::Cat(d),
            Conj::Mark(c) => c,
            _ => Canon::Copies,
        }
    }
}
