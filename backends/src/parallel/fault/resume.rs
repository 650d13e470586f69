//! Where the catalogued bugs of a resumption act: what the first mesh's saver leaves out of the
//! checkpoint, and what the second mesh's loader fails to restore (`levels/resume.rs` reads
//! these).

use super::Fault;
use meshparity_specs::catalog::Id;

/// How a resumption is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeFault {
    /// The loader's fresh optimizer has no moment tensors for the saved ones to land in.
    MomentsDropped,
    /// The step count (AdamW's bias correction and the schedule's position) restarts at 0.
    StepReset,
    /// The data loader starts over from the first batch.
    DataPositionReset,
    /// The dropout stream restarts at its seed.
    RngStreamReset,
    /// The router's bias buffer is left out of the save and the load is not strict.
    ExpertBiasNotSaved,
    /// Each EP rank of the resumed mesh loads the experts at its local indices (the first
    /// rank's).
    ExpertsByLocalIndex,
    /// Tensor-parallel shards joined along dim 0 whatever their split dim, viewed whole.
    TpShardWrongAxis,
    /// The MLP's fused fc1 TP-sharded without first chunking it into gate and up.
    Fc1SplitUnchunked,
}

impl ResumeFault {
    pub fn as_str(self) -> &'static str {
        match self {
            ResumeFault::MomentsDropped => "AdamW moments dropped on load",
            ResumeFault::StepReset => "step count and schedule restarted at 0 on load",
            ResumeFault::DataPositionReset => "data position restarted at the first batch",
            ResumeFault::RngStreamReset => "dropout stream restarted at its seed",
            ResumeFault::ExpertBiasNotSaved => "router bias left out of the checkpoint",
            ResumeFault::ExpertsByLocalIndex => {
                "experts loaded by their local index on every EP rank"
            }
            ResumeFault::TpShardWrongAxis => "tensor-parallel shards joined along dim 0 on load",
            ResumeFault::Fc1SplitUnchunked => {
                "fused fc1 TP-sharded on load without first chunking it into gate and up"
            }
        }
    }
}

impl Fault {
    pub fn resume(self) -> Option<ResumeFault> {
        Some(match self.0 {
            Id::ResumeMomentsDropped => ResumeFault::MomentsDropped,
            Id::ResumeStepReset => ResumeFault::StepReset,
            Id::ResumeDataPositionReset => ResumeFault::DataPositionReset,
            Id::ResumeRngStreamReset => ResumeFault::RngStreamReset,
            Id::ResumeExpertBiasNotSaved => ResumeFault::ExpertBiasNotSaved,
            Id::ResumeExpertsByLocalIndex => ResumeFault::ExpertsByLocalIndex,
            Id::ResumeTpShardWrongAxis => ResumeFault::TpShardWrongAxis,
            Id::ResumeFc1SplitUnchunked => ResumeFault::Fc1SplitUnchunked,
            _ => return None,
        })
    }
}
