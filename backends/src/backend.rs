//! The backend as the rest of meshparity sees it: a device chosen at run time and the jobs it
//! runs. Nothing outside this crate names a burn type.

use std::path::Path;

use burn::tensor::Device;
use meshparity_specs::{DType, Level, Limits, MeshConfig, ModelConfig, Training};

use crate::device::{self, Adapter, DeviceError};

use crate::levels::{self, Judged, LevelError, MutationOutcome, Outcome, Setup};
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
    /// (`burn-wgpu`, `llvmpipe (LLVM 15.0.6, 256 bits) [gl, software]`).
    pub fn describe(&self) -> (&'static str, String) {
        describe(&self.adapter)
    }

    fn setup<'a>(
        &'a self,
        model: &'a ModelConfig,
        training: &'a Training,
        dtype: DType,
    ) -> Result<Setup<'a>, LevelError> {
        let setup = Setup {
            model,
            training,
            dtype,
            device: &self.device,
        };
        if !self.device.supports_dtype(setup.burn_dtype()) {
            return Err(LevelError::Unsupported(format!(
                "dtype {dtype} on {}: the adapter has no {dtype} kernels (run this model on \
                 the CPU or another adapter)",
                self.describe().1
            )));
        }
        Ok(setup)
    }

    /// Run a job's computation. On a GPU the simulated ranks take turns on one thread: burn's
    /// wgpu streams are per thread, and ranks sharing tensors across threads gave wrong
    /// gradients there (tp2 losses off by 2e-3 after one step), while one thread matches the
    /// oracle. The CPU keeps its ranks in parallel.
    fn on_device<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        if self.adapter.kind.is_none() {
            return f();
        }
        match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
            Ok(pool) => pool.install(f),
            Err(_) => f(),
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
        let setup = self.setup(model, training, dtype)?;
        self.on_device(|| levels::reference(&setup, dir))
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
        let setup = self.setup(model, training, dtype)?;
        self.on_device(|| levels::check(&setup, mesh, level, limits, reference, out))
    }

    /// Train `mesh` once (with the catalogued bug `mutation`, if any) and judge it at every level
    /// in `levels`: what a calibration sweep runs per mesh and seed.
    #[allow(clippy::too_many_arguments)]
    pub fn levels(
        &self,
        model: &ModelConfig,
        training: &Training,
        dtype: DType,
        mesh: &MeshConfig,
        mutation: Option<&str>,
        levels: &[(Level, Limits)],
        reference: &Path,
        out: &Path,
    ) -> Result<Judged, LevelError> {
        let fault = mutation
            .map(|m| {
                Fault::from_name(m)
                    .ok_or_else(|| LevelError::Unsupported(format!("mutation `{m}`")))
            })
            .transpose()?;
        let setup = self.setup(model, training, dtype)?;
        self.on_device(|| levels::check::levels(&setup, mesh, fault, levels, reference, out))
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
        let setup = self.setup(model, training, dtype)?;
        self.on_device(|| levels::mutation(&setup, mesh, fault, levels, reference, out))
    }
}

/// Backend name and device label of an adapter, without opening it (the runner's metadata).
pub fn describe(adapter: &Adapter) -> (&'static str, String) {
    match adapter.kind {
        None => ("burn-flex", "cpu".to_owned()),
        Some(_) => ("burn-wgpu", adapter.label()),
    }
}
