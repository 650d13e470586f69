//! What a stage's layers know about themselves: the topology, their stage group, the
//! microbatch's context, and every rank's parameters. The layers (`stage.rs`, `experts.rs`,
//! `router.rs`, `dispatch.rs`, `ring.rs`, `rng.rs`) add their methods to [`StageCtx`] in their own files;
//! the type lives here, below all of them, so none of them imports another's.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use burn::tensor::{DType, Device, Tensor, TensorData};
use indexmap::IndexMap;
use meshparity_specs::ModelConfig;

use crate::llama::moe::Decided;
use crate::parallel::fault::{NormFault, Policies};
use crate::parallel::topology::{Layout, StageGroup, Topology};

/// A rank's parameter shards as autodiff leaves.
pub type Leaves = IndexMap<String, Tensor<2>>;

/// What a stage needs to know about itself.
pub struct StageCtx<'a> {
    pub model: &'a ModelConfig,
    pub device: &'a Device,
    pub dtype: DType,
    /// The mesh's groups and what applies on it (SP, experts, the odd rank).
    pub topo: &'a Topology,
    /// This stage's ranks for the microbatch: its replicas' TP × CP ranks, TP fastest.
    pub group: StageGroup,
    /// Sequences in the global batch (the load-balance loss averages over them).
    pub sequences: usize,
    /// Routing to replay (moe): per layer, over the global batch's tokens.
    pub replay: Option<&'a [Decided]>,
    /// Each replica's first global row of this microbatch.
    pub first_rows: Vec<usize>,
    /// Every rank's leaves, indexed by global rank.
    pub leaves: &'a [Leaves],
    /// What the run's mutation does in the layers (the correct computation by default).
    pub policies: Policies,
    /// The loss's label smoothing ε and z-loss weight (0: none).
    pub loss: crate::llama::LossTerms,
    /// The step's dropout, `None` where the run drops nothing.
    pub dropout: Option<crate::dropout::Dropout>,
    /// What backward re-runs instead of keeping (`None`: every activation kept).
    pub recompute: Option<meshparity_specs::Recompute>,
    /// Whether this is backward's re-run of a recomputed span.
    pub rerunning: bool,
    /// Whether the layers run a recomputed span's forward, which builds no graph: the
    /// parameters are read as plain values ([`StageCtx::w`]).
    pub untracked: AtomicBool,
}

/// Which computation faults act in one layer.
#[derive(Clone, Copy, Default)]
pub(super) struct LayerFaults {
    pub(super) norm: Option<NormFault>,
    pub(super) residual: Option<f64>,
    pub(super) swiglu_wrong_operand: bool,
    pub(super) rope_swapped: bool,
    pub(super) unweighted_merge: bool,
    /// Whether ring attention's backward uses the rank's own K/V at every step (cp > 1 only).
    pub(super) stale_kv_backward: bool,
    /// Whether RoPE's positions restart at each of the rank's CP chunks (packed rows only).
    pub(super) positions_from_chunks: bool,
    /// Whether the documents' boundaries come from their unpadded lengths (padded documents
    /// under CP only).
    pub(super) unpadded_boundaries: bool,
    /// The relative size of the noise on the odd rank's partial MLP output (tp > 1 only).
    pub(super) activation_noise: Option<f64>,
}

impl StageCtx<'_> {
    /// The stage group's layout: which of its indices form TP groups, CP rings, replicas.
    pub(super) fn groups(&self) -> Layout {
        self.group.layout
    }

    /// The group's global ranks, by index.
    pub(super) fn ranks(&self) -> &[usize] {
        &self.group.ranks
    }

    pub(super) fn tp(&self) -> usize {
        self.topo.tp()
    }

    /// Each TP rank's block of the vocabulary: the vocabulary padded up to a multiple of tp
    /// (Megatron's padding), the last blocks ending in rows past the vocabulary.
    pub(super) fn vocab_block(&self) -> usize {
        (self.model.vocab as usize).div_ceil(self.tp())
    }

    pub(super) fn w(&self, i: usize, name: &str) -> Tensor<2> {
        let leaf = self.leaves[self.group.ranks[i]][name].clone();
        if self.untracked.load(Relaxed) {
            // Not `detach()`: burn keeps a detached leaf's `require_grad`, so ops on it would
            // still build a graph.
            leaf.inner().autodiff()
        } else {
            leaf
        }
    }

    pub(super) fn constant<const D: usize>(&self, v: Vec<f64>, shape: [usize; D]) -> Tensor<D> {
        Tensor::<D>::from_data(TensorData::new(v, shape), (self.device, self.dtype))
    }
}
