//! The backend as the rest of meshparity sees it: a device chosen at run time and the jobs it
//! runs. Nothing outside this crate names a burn type.

use std::path::Path;

use burn::tensor::Device;
use meshparity_specs::{DType, Level, Limits, MeshConfig, ModelConfig, Training};

use crate::device::{self, Adapter, DeviceError};

use crate::levels::{self, LevelError, MutationOutcome, Outcome, Setup};
use crate::parallel::Fault;

/// A burn device and the jobs that run on it.
pub struct Backend {
    device: Device,
    adapter: Adapter,
}

impl Backend {
    /// The flex CPU backend: the embedded default, bit-deterministic run to run.
    pub fn cpu() -> Self {
        Self::open(meshparity_specs::Device::Cpu).expect("the CPU is always there")
    }

    /// The backend of `device`, or why this binary or machine cannot offer it.
    pub fn open(device: meshparity_specs::Device) -> Result<Self, DeviceError> {
        let adapter = device::find(device)?;
        Ok(Self {
            device: device::burn_device(&adapter),
            adapter,
        })
    }

    /// Backend and device, for reports: (`burn-flex`, `cpu`) or
    /// (`burn-wgpu`, `llvmpipe (LLVM 15.0.6, 256 bits) [vulkan, software]`).
    pub fn describe(&self) -> (&'static str, String) {
        describe(&self.adapter)
    }

    fn setup<'a>(
        &'a self,
        model: &'a ModelConfig,
        training: &'a Training,
        dtype: DType,
    ) -> Setup<'a> {
        Setup {
            model,
            training,
            dtype,
            device: &self.device,
        }
    }

    /// The oracle's artifacts into `dir`; returns seconds.
    pub fn reference(
        &self,
        model: &ModelConfig,
        training: &Training,
        dtype: DType,
        dir: &Path,
    ) -> Result<f64, LevelError> {
        levels::reference(&self.setup(model, training, dtype), dir)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn check(
        &self,
        model: &ModelConfig,
        training: &Training,
        dtype: DType,
        mesh: &MeshConfig,
        level: Level,
        limits: &Limits,
        reference: &Path,
        out: &Path,
    ) -> Result<Outcome, LevelError> {
        levels::check(
            &self.setup(model, training, dtype),
            mesh,
            level,
            limits,
            reference,
            out,
        )
    }

    /// `mutation` is a catalog name.
    #[allow(clippy::too_many_arguments)]
    pub fn mutation(
        &self,
        model: &ModelConfig,
        training: &Training,
        dtype: DType,
        mesh: &MeshConfig,
        mutation: &str,
        levels: &[(Level, Limits)],
        reference: &Path,
        out: &Path,
    ) -> Result<MutationOutcome, LevelError> {
        let fault = Fault::from_name(mutation)
            .ok_or_else(|| LevelError::Unsupported(format!("mutation `{mutation}`")))?;
        levels::mutation(
            &self.setup(model, training, dtype),
            mesh,
            fault,
            levels,
            reference,
            out,
        )
    }
}

/// Backend name and device label of an adapter, without opening it (the runner's metadata).
pub fn describe(adapter: &Adapter) -> (&'static str, String) {
    match adapter.kind {
        None => ("burn-flex", "cpu".to_owned()),
        Some(_) => ("burn-wgpu", adapter.label()),
    }
}
