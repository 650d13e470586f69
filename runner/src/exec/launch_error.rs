//! Why an attempt's worker could not be started or followed: the executors' one error type,
//! carried in [`crate::exec::child::Ending::SpawnFailed`] and reported as the job's error.

use std::path::PathBuf;

/// A worker that did not start, or that the executor lost track of.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A file or directory the attempt needs (its logs, its batch script, its job id).
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A process the executor starts or waits on (the worker, a serving worker, `sbatch`).
    #[error("{what}: {source}{hint}")]
    Process {
        what: String,
        #[source]
        source: std::io::Error,
        /// What to check, where there is something to say (`sbatch` not installed).
        hint: &'static str,
    },
    /// A program that ran and refused (`sbatch` with its stderr).
    #[error("{command} failed: {stderr}")]
    Refused { command: String, stderr: String },
    /// A program that answered what it should not have.
    #[error("{0}")]
    Answer(String),
    /// A serving worker's request that could not be encoded.
    #[error("encoding a serving worker's request: {0}")]
    Encode(#[from] serde_json::Error),
}

impl LaunchError {
    /// `action` on `path` failed (for `map_err`).
    pub fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> LaunchError {
        let path = path.into();
        move |source| LaunchError::Io {
            action,
            path,
            source,
        }
    }

    /// Starting or waiting on `what` failed (for `map_err`).
    pub fn process(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LaunchError {
        let what = what.into();
        move |source| LaunchError::Process {
            what,
            source,
            hint: "",
        }
    }
}
