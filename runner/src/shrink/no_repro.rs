//! Why a failure gets no repro spec: said on the job's stderr, the verdict standing without it.

use std::path::PathBuf;

/// A failure that cannot be shrunk.
#[derive(Debug, thiserror::Error)]
pub enum NoRepro {
    #[error("the spec was not loaded")]
    SpecNotLoaded,
    #[error("the spec defines no engine `{0}`")]
    NoEngine(String),
    #[error("its reference runs on another engine")]
    OtherReference,
    #[error("engine `{0}` names no value that may shrink ([engines.{0}.shrink])")]
    NothingShrinks(String),
    /// The command engine's defining file, read back to write its table into the repro spec.
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Toml {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("{} defines no [engines.{name}]", path.display())]
    NoTable { path: PathBuf, name: String },
    #[error("writing the engine's table: {0}")]
    Write(#[from] toml::ser::Error),
}
