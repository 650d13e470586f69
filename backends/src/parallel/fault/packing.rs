//! Where the catalogued bugs of packed sequences act: what a context-parallel rank knows of the
//! document boundaries at positions it does not hold (`parallel/layers/ring.rs` reads this).

use super::Fault;
use meshparity_specs::catalog::Id;

impl Fault {
    /// Whether each CP rank masks the K/V chunks it receives around the ring causally only,
    /// without their documents' boundaries (TransformerEngine#3331: THD + CP approximating
    /// each ring step's sequence boundaries).
    pub(super) fn ring_crosses_documents(self) -> bool {
        self.0 == Id::CpRingCrossesDocuments
    }

    /// Whether each CP rank derives its packed rows' RoPE positions from its own chunks, so a
    /// document that began in a chunk another rank holds restarts at 0 at this rank's chunk
    /// (Megatron-LM PR#5243; prime-rl PR#2392).
    pub(super) fn packed_positions_from_chunks(self) -> bool {
        self.0 == Id::CpPackedPositionsFromChunks
    }

    /// Whether each CP rank takes its tokens by the row-level split while its positions are
    /// the per-document layout's (Megatron-Bridge PR#1867, Megatron-LM PR#7238: generic CP
    /// slicing of packed THD batches).
    pub(super) fn thd_split_by_rows(self) -> bool {
        self.0 == Id::CpThdSplitByRows
    }

    /// Whether each CP rank's attention takes the documents' boundaries from their real token
    /// counts (the unpadded cu_seqlens) where the padded starts belong (Megatron-LM PR#4495,
    /// Automodel PR#3640).
    pub(super) fn thd_unpadded_boundaries(self) -> bool {
        self.0 == Id::CpThdUnpaddedBoundaries
    }
}
