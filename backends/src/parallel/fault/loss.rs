//! Where the catalogued bugs of the loss and the data side act: the vocab-parallel
//! cross-entropy (smoothing, padding, gathered logits), the labels and the loss's scale under
//! context parallelism, and the initial weights. Each is a flag the layer that owns the code
//! path reads.

use super::Fault;
use meshparity_specs::catalog::Id;

impl Fault {
    /// Whether label smoothing's uniform share is averaged over the rank's own vocabulary block
    /// (its size as the vocabulary's) instead of the whole vocabulary.
    pub(super) fn smooths_over_local_vocab(self) -> bool {
        self.0 == Id::LabelSmoothingLocalVocab
    }

    /// Whether the output layer's logits are gathered over TP and the vocab-parallel
    /// cross-entropy takes each rank's full copy as its shard (Megatron-LM#7452 finding 2).
    pub(super) fn gathers_logits_before_loss(self) -> bool {
        self.0 == Id::CeOnGatheredLogits
    }

    /// Whether each CP rank makes its next-token labels by rolling its own tokens (alibaba
    /// ChatLearn PR#343's review, verl PR#6564).
    pub(super) fn rolls_labels_per_cp_shard(self) -> bool {
        self.0 == Id::CpLabelsRolledPerShard
    }

    /// Whether each CP rank makes the MTP layer's inputs and labels by rolling its own share
    /// (NeMo Automodel PR#3544's pre-fix local roll; torchtitan PR#4544 shifts first).
    pub(super) fn mtp_rolled_per_cp_shard(self) -> bool {
        self.0 == Id::MtpRolledPerCpShard
    }

    /// Whether the MTP loss enters training divided by cp (Megatron-LM PR#3959).
    pub(super) fn mtp_loss_scaled_down_by_cp(self) -> bool {
        self.0 == Id::MtpLossScaledDownByCp
    }

    /// Whether each microbatch's loss is normalized by its own valid-token count and the
    /// microbatches' losses averaged (huggingface/transformers#34191).
    pub(super) fn normalizes_per_microbatch(self) -> bool {
        self.0 == Id::MicrobatchLocalLossNormalization
    }

    /// Whether the logged loss sums the microbatches' own mean losses without dividing by
    /// their number (huggingface/transformers#35204): the report only, never backward.
    pub(super) fn logs_microbatch_sum(self) -> bool {
        self.0 == Id::LossReportMicrobatchSum
    }

    /// Whether each CP rank's loss enters backward scaled by cp (verl PR#4250).
    pub(super) fn scales_loss_grad_by_cp(self) -> bool {
        self.0 == Id::CpLossGradScaledByCp
    }

    /// Whether each data-parallel replica draws its own initial weights (facebookresearch/detr
    /// #544).
    pub(super) fn init_seeded_per_dp_rank(self) -> bool {
        self.0 == Id::InitSeededPerDpRank
    }

    /// Whether a padded vocabulary's padding logits enter the softmax and label smoothing's
    /// share as if they were tokens (Megatron-LM#1754).
    pub(super) fn leaves_vocab_padding_unmasked(self) -> bool {
        self.0 == Id::VocabPaddingUnmasked
    }
}
