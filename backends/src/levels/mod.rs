//! The burn engine's runs as the artifact contract ([`meshparity_engine::artifact`]): the
//! reference run writes the oracle's artifacts once per model configuration; a mesh run trains
//! the mesh once (with a mutation, if asked) and writes the candidate's. Judging them is the
//! engine crate's business, the same for every engine.
//!
//! - `reference.rs` — the oracle's artifacts;
//! - `run.rs` — a mesh run's artifacts, rank shards merged to world-size-1 names;
//! - `resume.rs` — a `[[resume]]` pair's run: saved on one mesh, resumed on another.

pub mod reference;
pub mod resume;
pub mod run;
pub mod trace;

use std::path::Path;

use burn::tensor::Device;
use meshparity_compare::InputError;
use meshparity_engine::{checkpoint, Description, Manifest, Shards};
use meshparity_specs::{DType, MeshConfig, ModelConfig, Training};

pub use reference::reference;
pub use resume::resumed;
pub use run::{run, Roundtrip};

use crate::train::RunError;

/// What every run of one model shares.
pub struct Setup<'a> {
    pub model: &'a ModelConfig,
    pub training: &'a Training,
    pub dtype: DType,
    pub device: &'a Device,
    /// Engine and device, for manifests.
    pub describe: Description,
    /// Whether the device's reductions repeat to the bit (the CPU's do). A GPU's `sum` need
    /// not: two ranks summing the squares of the same gradients on an H200 got norms 2.6e-10
    /// apart, so their agreement is judged with [`GPU_NORM_AGREEMENT`] there.
    pub repeatable: bool,
}

/// How far (relative) ranks' gradient norms may part on a device whose reductions do not
/// repeat to the bit: f32 summation-order noise, ~10⁴ below the smallest disagreement a norm
/// over the wrong ranks makes (a missing shard's share, percents).
pub const GPU_NORM_AGREEMENT: f64 = 1e-6;

impl Setup<'_> {
    /// A run's manifest before it writes anything: this engine and device, `world_size` ranks.
    pub(crate) fn manifest(&self, world_size: u64) -> Manifest {
        Manifest {
            engine: self.describe.engine.clone(),
            device: self.describe.device.clone(),
            world_size,
            dtype: Some(self.dtype),
            ..Manifest::default()
        }
    }

    pub fn burn_dtype(&self) -> burn::tensor::DType {
        match self.dtype {
            DType::F64 => burn::tensor::DType::F64,
            DType::F32 => burn::tensor::DType::F32,
            DType::F16 => burn::tensor::DType::F16,
            DType::Bf16 => burn::tensor::DType::BF16,
        }
    }

    /// `span`'s steps of this setup's model on `mesh` ([`crate::train::segment`]).
    pub fn segment(
        &self,
        mesh: &MeshConfig,
        span: crate::train::Span<'_>,
        probe: crate::train::Probe<'_>,
    ) -> Result<crate::train::Segment, RunError> {
        let (model, training, device) = (self.model, self.training, self.device);
        crate::train::segment(
            model,
            mesh,
            training,
            span,
            probe,
            device,
            self.burn_dtype(),
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LevelError {
    #[error("writing {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Artifact(#[from] meshparity_engine::ArtifactError),
    #[error(transparent)]
    Trace(#[from] meshparity_engine::TraceError),
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LevelError + '_ {
    move |source| LevelError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Save `t` as `file` in `dir` and list it among the artifacts written.
pub(crate) fn save(
    dir: &Path,
    file: &str,
    t: &Shards,
    written: &mut Vec<String>,
) -> Result<(), LevelError> {
    let path = dir.join(file);
    checkpoint::save(&path, t).map_err(io(&path))?;
    written.push(file.to_owned());
    Ok(())
}
