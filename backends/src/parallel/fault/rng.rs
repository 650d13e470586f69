//! Where the catalogued bugs of the random streams act: which block of dropout's global mask a
//! rank draws (`parallel/layers/rng.rs` reads these).

use super::Fault;
use meshparity_specs::catalog::Id;

impl Fault {
    /// Whether the TP ranks draw the attention probabilities' mask from the replicated stream:
    /// every rank the first heads' mask (InternLM PR#405).
    pub(super) fn dropout_shared_across_tp(self) -> bool {
        self.0 == Id::DropoutSharedAcrossTp
    }

    /// Whether the replicated residual stream's dropout is drawn from a stream forked per TP
    /// rank (bigscience Megatron-DeepSpeed PR#276).
    pub(super) fn dropout_forked_in_replicated_region(self) -> bool {
        self.0 == Id::DropoutForkedInReplicatedRegion
    }

    /// Whether each CP rank draws the attention probabilities' mask at its local indices
    /// (Megatron-LM PR#4828).
    pub(super) fn dropout_shared_across_cp(self) -> bool {
        self.0 == Id::DropoutSharedAcrossCp
    }

    /// Whether activation recompute restores the default generator but not the tracker's
    /// model-parallel stream, so the re-run draws the TP region's next masks (torch's
    /// `checkpoint` around Megatron's tracker; allenai/OLMo-core PR#828).
    pub(super) fn recompute_rng_not_restored(self) -> bool {
        self.0 == Id::RecomputeRngNotRestored
    }
}
