//! Where the catalogued bugs of routed experts act: the router (its top-k scores, capacity,
//! the score-correction bias) and expert parallelism's exchanges and gradient reductions. Each
//! is a flag the layer or reduction that owns the code path reads.

use super::Fault;
use meshparity_specs::catalog::Id;

impl Fault {
    /// Whether layer `layer`'s score-correction bias moves on the first rank of a stage only.
    pub(super) fn bias_one_rank(self, layer: u32) -> bool {
        self.0 == Id::ExpertBiasOneRank && layer == 0
    }

    /// Whether layer `layer`'s capacity is decided on each rank's own tokens.
    pub(super) fn capacity_local(self, layer: u32) -> bool {
        self.0 == Id::CapacityLocalTokens && layer == 0
    }

    /// Whether `layer`'s router skips renormalizing the top-k scores. Measured: on one rank of
    /// dp2·tp2·sp·cp2 in bf16 no level caught it (the combined output moved by 8e-2 on an
    /// eighth of the tokens), so it acts on every rank.
    pub(super) fn router_unnormalized(self, layer: u32) -> bool {
        self.0 == Id::RouterNotRenormalized && layer == 0
    }

    /// Whether `layer`'s all-to-all combine returns each rank's rows one place off.
    pub(super) fn ep_combine_permuted(self, layer: u32) -> bool {
        self.0 == Id::EpCombineWrongPermutation && layer == 0
    }

    /// Whether expert gradients are all-reduced over the dense data-parallel group instead of
    /// the expert-data-parallel one.
    pub(super) fn expert_grad_dense_group(self) -> bool {
        self.0 == Id::ExpertGradDenseGroup
    }

    /// Whether expert gradients are never synced over the expert-data-parallel group.
    pub(super) fn expert_grad_sync_skipped(self) -> bool {
        self.0 == Id::ExpertGradSyncSkipped
    }

    /// Whether expert gradients, once reduced over their expert-data-parallel group, are ep
    /// times too large (the missing 1/ep of Megatron's `expert_gradient_scaling_factor`).
    pub(super) fn expert_grads_scaled_by_ep(self) -> bool {
        self.0 == Id::ExpertGradScaledByEp
    }

    /// Whether the expert share of the gradient norm misses the expert-parallel axis.
    pub(super) fn norm_misses_ep(self) -> bool {
        self.0 == Id::ClipNormMissingEp
    }
}
