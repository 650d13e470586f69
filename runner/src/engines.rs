//! How the runner reaches engines without linking any: the binary hands it an [`Engines`],
//! which opens the engine a job computes on. The runner, the planner and the reports never see
//! a numeric backend; only the binary (and the engine's own crate) does.

use meshparity_engine::{Description, Engine};
use meshparity_specs::{Device, ModelConfig, Spec};

/// The engines this binary offers.
pub trait Engines: Sync {
    /// The engine that trains `model` (of `spec`) on `device`, or why this binary or machine
    /// cannot offer it.
    fn open(
        &self,
        spec: &Spec,
        model: &ModelConfig,
        device: Device,
    ) -> Result<Box<dyn Engine>, String>;

    /// Engine name and device label (run metadata), without running anything.
    fn describe(
        &self,
        spec: &Spec,
        model: &ModelConfig,
        device: Device,
    ) -> Result<Description, String>;
}
