//! Why an input could not be compared. Each error names the file and what is wrong with it;
//! numeric mismatches are not errors (they are results).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{path}` is not a valid safetensors file: {reason}")]
    Safetensors { path: PathBuf, reason: String },
    #[error("`{path}` is not a valid checkpoint index: {reason}")]
    Index { path: PathBuf, reason: String },
    #[error("`{path}` line {line}: {reason}")]
    Curve {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("`{path}`: {reason}")]
    Other { path: PathBuf, reason: String },
    #[error("nothing was compared: {0}")]
    NothingCompared(String),
    #[error("nothing was gated: {0}")]
    NothingGated(String),
    #[error("{0}")]
    Usage(String),
}

impl InputError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub fn safetensors(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Self::Safetensors {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
