//! How the runner reaches engines without linking any: the binary hands it an [`Engines`],
//! which opens the engine a job computes on. The runner, the planner and the reports never see
//! a numeric backend; only the binary (and the engine's own crate) does.

use std::path::Path;

use meshparity_engine::{Description, Engine};
use meshparity_specs::{Device, ModelConfig, Spec};

/// What an engine is opened for.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// The spec, where the caller has it loaded: a worker started from a job file loads it
    /// only for models that name an `[engines.NAME]` (or run a variant), which need it.
    pub spec: Option<&'a Spec>,
    pub model: &'a ModelConfig,
    pub device: Device,
    /// The `[variants.NAME]` to run (its checkout), if any.
    pub variant: Option<&'a str>,
    /// Where engines may keep what they prepare (a variant's checkout).
    pub cache: &'a Path,
}

/// The engines this binary offers.
pub trait Engines: Sync {
    /// The engine for `target`, or why this binary or machine cannot offer it.
    fn open(&self, target: &Target<'_>) -> Result<Box<dyn Engine>, OpenError>;

    /// Engine name and device label (run metadata), without running anything.
    fn describe(&self, target: &Target<'_>) -> Result<Description, OpenError>;
}

/// Why an engine cannot be opened for a target.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the spec defines no engine `{0}`")]
    NoEngine(String),
    #[error("engine `{0}` is defined in the spec, which was not loaded")]
    SpecNotLoaded(String),
    #[error("the spec defines no variant `{0}`")]
    NoVariant(String),
    /// The engine's own refusal (no such device, a variant's checkout that failed), kept typed.
    #[error(transparent)]
    Engine(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl OpenError {
    /// The engine crate's error `e` as why it cannot be opened.
    pub fn engine(e: impl std::error::Error + Send + Sync + 'static) -> OpenError {
        OpenError::Engine(Box::new(e))
    }
}
