//! Where each catalogued mutation is injected.
//!
//! A fault is a property of one run, consulted at the sites where the bug would live in a real
//! training stack: collective calls (by site name), the gradient accumulator, and the gradient
//! finalization. Keeping every injection point in this one file makes it easy to see that the
//! correct path and the mutated path differ only where the catalog says.

/// How a collective call is altered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alteration {
    /// Each rank keeps its own input (the reduction never happened).
    Skip,
    /// A sum becomes a mean.
    Average,
    /// A point-to-point send goes to another stage than the receiver expects.
    Misroute,
}

impl Alteration {
    pub fn as_str(self) -> &'static str {
        match self {
            Alteration::Skip => "skipped",
            Alteration::Average => "averaged",
            Alteration::Misroute => "sent to the wrong stage",
        }
    }
}

/// One injected bug; names match `meshparity_specs::mutation::CATALOG`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    SkipTpForwardAllReduce,
    TpAverageInsteadOfSum,
    SkipDpGradAllReduce,
    LocalLossNormalization,
    SkipSpNormGradAllReduce,
    ReduceBeforeLastMicrobatch,
    WrongSendPeer,
    ScaleOneRankGrad,
}

/// The factor `scale-one-rank-grad` applies to the last rank's gradients: a missing `1/dp` on
/// one rank of a dp2 group, the typical form of this bug.
pub const WRONG_SCALE: f64 = 2.0;

impl Fault {
    pub const ALL: [Fault; 8] = [
        Fault::SkipTpForwardAllReduce,
        Fault::TpAverageInsteadOfSum,
        Fault::SkipDpGradAllReduce,
        Fault::LocalLossNormalization,
        Fault::SkipSpNormGradAllReduce,
        Fault::ReduceBeforeLastMicrobatch,
        Fault::WrongSendPeer,
        Fault::ScaleOneRankGrad,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::SkipTpForwardAllReduce => "tp-skip-forward-all-reduce",
            Fault::TpAverageInsteadOfSum => "tp-average-instead-of-sum",
            Fault::SkipDpGradAllReduce => "dp-skip-grad-all-reduce",
            Fault::LocalLossNormalization => "dp-local-loss-normalization",
            Fault::SkipSpNormGradAllReduce => "sp-skip-norm-grad-all-reduce",
            Fault::ReduceBeforeLastMicrobatch => "grad-reduce-before-last-microbatch",
            Fault::WrongSendPeer => "pp-wrong-send-peer",
            Fault::ScaleOneRankGrad => "scale-one-rank-grad",
        }
    }

    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    /// What happens to the collective at `site` (a full site name such as
    /// `layers.0.mlp.down.fwd.all_reduce`).
    pub fn alter(self, site: &str) -> Option<Alteration> {
        let hit = |prefix: &str| site.starts_with(prefix);
        match self {
            // One row-parallel layer (the first MLP) forgets its reduction: a bug in one layer,
            // as such bugs usually are.
            Fault::SkipTpForwardAllReduce if hit("layers.0.mlp.down.fwd.") => {
                Some(Alteration::Skip)
            }
            Fault::TpAverageInsteadOfSum if hit("layers.0.attn.o.fwd.") => {
                Some(Alteration::Average)
            }
            Fault::SkipDpGradAllReduce if hit("grad.") && site.ends_with(".dp.all_reduce") => {
                Some(Alteration::Skip)
            }
            // A per-rank mean loss: the global token count is never all-reduced, and gradients
            // (and the logged loss) are averaged over DP as a per-rank mean would need.
            Fault::LocalLossNormalization if hit("loss.tokens.dp.") => Some(Alteration::Skip),
            Fault::LocalLossNormalization
                if (hit("grad.") || hit("loss.report.")) && site.ends_with(".dp.all_reduce") =>
            {
                Some(Alteration::Average)
            }
            Fault::SkipSpNormGradAllReduce
                if hit("grad.")
                    && site.contains("norm.weight")
                    && site.ends_with(".tp.all_reduce") =>
            {
                Some(Alteration::Skip)
            }
            Fault::WrongSendPeer if hit("pp.stage0.fwd.send") => Some(Alteration::Misroute),
            _ => None,
        }
    }

    /// Whether the gradients of microbatch `mb` of `count` are lost because the gradients were
    /// finalized (reduced and handed to the optimizer) before it accumulated.
    pub fn drops_microbatch(self, mb: usize, count: usize) -> bool {
        self == Fault::ReduceBeforeLastMicrobatch && count > 1 && mb + 1 == count
    }

    /// The wrong factor applied to a rank's gradients, if this fault scales that rank.
    pub fn grad_scale(self, rank: usize, world: usize) -> Option<f64> {
        (self == Fault::ScaleOneRankGrad && rank + 1 == world).then_some(WRONG_SCALE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalog_entry_has_a_fault() {
        for m in meshparity_specs::mutation::CATALOG {
            assert!(
                Fault::from_name(m.name).is_some(),
                "{} has no fault",
                m.name
            );
        }
        assert_eq!(Fault::ALL.len(), meshparity_specs::mutation::CATALOG.len());
    }
}
