//! Where the catalogued bugs of packed sequences act: what a context-parallel rank knows of the
//! document boundaries at positions it does not hold (`parallel/layers/ring.rs` reads this).

use super::Fault;
use meshparity_specs::catalog::Id;

impl Fault {
    /// Whether each CP rank masks the K/V chunks it receives around the ring causally only,
    /// without their documents' boundaries (TransformerEngine#3331: THD + CP approximating
    /// each ring step's sequence boundaries).
    pub fn ring_crosses_documents(self) -> bool {
        self.0 == Id::CpRingCrossesDocuments
    }
}
