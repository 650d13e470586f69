//! Why a level could not be judged (as opposed to judged and failed): its own module, so the
//! judge's helpers (derived views, vacuity, resumed state, the optimizer replay) name it without
//! importing the judge back.

use meshparity_compare::InputError;
use meshparity_engine::ArtifactError;
use meshparity_specs::Level;

/// Why a level could not be judged (as opposed to judged and failed).
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Damaged(#[from] meshparity_engine::SealError),
    #[error("writing {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("nothing gated: {0}")]
    NothingGated(String),
    /// Less evidence than the level needs: a curve shorter than the run's steps, logits that
    /// are missing or empty. Never a pass, whatever the two sides agree on.
    #[error("too little to judge {level}: {why}")]
    TooLittle { level: Level, why: String },
    #[error(transparent)]
    Replay(#[from] crate::optimizer_step::ReplayError),
    #[error(transparent)]
    Sites(#[from] crate::sites::SitesError),
    #[error("the {0} level is not judged from artifacts yet")]
    Unsupported(Level),
}
