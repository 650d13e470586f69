//! Where the catalogued bugs of the moe's auxiliary losses act (`parallel/layers/experts.rs`
//! reads this).

use super::Fault;
use meshparity_specs::catalog::Id;

impl Fault {
    /// Whether layer `layer`'s load-balance loss divides by the sequences of every
    /// data-parallel replica's copy of the global batch (the global count taken again over the
    /// DP group) while each rank adds only its own sequences' terms: the loss and its gradient
    /// 1/dp of world size 1's (Megatron-LM#3672, fixed in PR#3769: `global_aux_loss`'s token
    /// count all-reduced over a group that includes DP while the probabilities stay local;
    /// NeMo Automodel PR#1412: the aux gradient left divided by the DP size).
    pub fn aux_loss_over_dp(self, layer: u32) -> bool {
        self.0 == Id::AuxLossScaledByDp && layer == 0
    }
}
