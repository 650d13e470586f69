//! What a job's id is hashed from: its own module, so the planner and the cells' shared pieces
//! (`cell_key`) both name it without importing each other.

use meshparity_specs::{DType, Device, Level, MeshConfig, ModelConfig, Training};
use serde::Serialize;

/// What a reference job writes, as a number raised whenever that changes: a reference is
/// cached across runs by its identity, and one written before (2: its per-site trace, which
/// the trace level and localization read; 3: a command engine's reference traced too) lacks
/// what this build's levels need.
pub(super) const REFERENCE_FORMAT: u32 = 3;

/// What makes two jobs the same job. Model and mesh names are part of a check job (renaming is
/// a different job to a user); a reference job is named by its configuration alone, so models
/// that differ only in name share it.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(super) enum Identity<'a> {
    Reference {
        /// [`REFERENCE_FORMAT`]: a cached reference an older build wrote is not reused.
        format: u32,
        model: &'a ModelConfig,
        dtype: DType,
        training: &'a Training,
        #[serde(skip_serializing_if = "Device::is_cpu")]
        device: Device,
    },
    Train {
        model_name: &'a str,
        model: &'a ModelConfig,
        mesh_name: &'a str,
        mesh: &'a MeshConfig,
        dtype: DType,
        levels: &'a [Level],
        training: &'a Training,
        #[serde(skip_serializing_if = "Device::is_cpu")]
        device: Device,
    },
    Check {
        model_name: &'a str,
        model: &'a ModelConfig,
        mesh_name: &'a str,
        mesh: &'a MeshConfig,
        dtype: DType,
        level: Level,
        training: &'a Training,
        #[serde(skip_serializing_if = "Device::is_cpu")]
        device: Device,
    },
    Mutation {
        model_name: &'a str,
        model: &'a ModelConfig,
        mesh_name: &'a str,
        mesh: &'a MeshConfig,
        dtype: DType,
        mutation: &'a str,
        training: &'a Training,
        #[serde(skip_serializing_if = "Device::is_cpu")]
        device: Device,
    },
}
