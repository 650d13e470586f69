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
    pub(super) fn aux_loss_over_dp(self, layer: u32) -> bool {
        self.0 == Id::AuxLossScaledByDp && layer == 0
    }

    /// How layer `layer`'s per-token load-balance loss misreads a rank's token count, if it
    /// does (only the per-token form pre-multiplies by one; the catalog's `TokenAux`).
    pub(super) fn aux_token_count(self, layer: u32) -> Option<TokenCount> {
        if layer != 0 {
            return None;
        }
        match self.0 {
            Id::AuxTokenShareOverSequence => Some(TokenCount::WholeSequenceDivisor),
            Id::AuxTokenCountOverwritten => Some(TokenCount::WholeSequenceMultiplier),
            _ => None,
        }
    }
}

/// Which of the per-token form's two counts (the pre-multiplier, the scores' divisor) is the
/// whole sequence's where it should be the rank's own: the correct form uses the rank's own
/// count for both, so they cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenCount {
    /// The scores averaged over the whole sequence's count (Megatron-LM PR#5047, #1652): each
    /// rank's terms scaled by own/whole.
    WholeSequenceDivisor,
    /// The pre-multiplier read after the in-place all-reduce summed it (Megatron-LM PR#7481,
    /// #7452 finding 10): each rank's terms scaled by whole/own.
    WholeSequenceMultiplier,
}

impl TokenCount {
    /// What a rank holding `own` of a sequence's `whole` real tokens multiplies its terms by.
    pub fn factor(self, own: usize, whole: usize) -> f64 {
        if own == 0 {
            // No token of the sequence here: nothing to scale.
            return 1.0;
        }
        match self {
            TokenCount::WholeSequenceDivisor => own as f64 / whole as f64,
            TokenCount::WholeSequenceMultiplier => whole as f64 / own as f64,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            TokenCount::WholeSequenceDivisor => "per-token share averaged over the whole sequence",
            TokenCount::WholeSequenceMultiplier => {
                "per-token share pre-multiplied by the all-reduced count"
            }
        }
    }
}
