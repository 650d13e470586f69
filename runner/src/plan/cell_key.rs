//! What every job of one cell shares — its names, mesh, model, training and device — and the
//! identities its jobs hash: one place for the planner's cells ([`super::build`]) and the
//! variants' cells ([`super::variants`]).

use meshparity_specs::{Cell, Level, MeshConfig, ModelConfig, Training};

use super::identity::Identity;
use super::job::{Job, JobId, JobKind};

pub(super) struct CellKey<'c> {
    pub cell: &'c Cell<'c>,
    pub model_name: &'c str,
    pub mesh_name: &'c str,
    pub mesh: MeshConfig,
    pub model: &'c ModelConfig,
    pub training: &'c Training,
    /// `model@dtype/mesh`, the start of every job name of the cell.
    pub prefix: String,
}

impl<'c> CellKey<'c> {
    pub fn new(cell: &'c Cell<'c>, model: &'c ModelConfig, training: &'c Training) -> Self {
        let model_name = cell.model.name.value.as_str();
        let mesh_name = cell.mesh.name.value.as_str();
        CellKey {
            cell,
            model_name,
            mesh_name,
            mesh: cell.mesh.config(),
            model,
            training,
            prefix: format!("{model_name}@{}/{mesh_name}", cell.dtype),
        }
    }

    /// A job of the cell, on the mesh's ranks, without a tolerance or a variant yet.
    pub fn job(&self, id: JobId, name: String, kind: JobKind) -> Job {
        Job {
            id,
            name,
            kind,
            models: vec![self.model_name.to_owned()],
            mesh: Some(self.mesh_name.to_owned()),
            mesh_tag: Some(self.mesh.tag(self.cell.dtype)),
            dtype: self.cell.dtype,
            world_size: self.mesh.world_size(),
            model_config: self.model.clone(),
            mesh_config: Some(self.mesh),
            tolerance: None,
            limits: None,
            training: self.training.clone(),
            device: self.cell.device,
            variant: None,
            repeat: 1,
        }
    }

    /// The identity of the cell's training, judged at `levels`.
    pub fn train<'a>(&'a self, levels: &'a [Level]) -> Identity<'a> {
        Identity::Train {
            model_name: self.model_name,
            model: self.model,
            mesh_name: self.mesh_name,
            mesh: &self.mesh,
            dtype: self.cell.dtype,
            levels,
            training: self.training,
            device: self.cell.device,
        }
    }

    /// The identity of the cell's check at `level`.
    pub fn check(&self, level: Level) -> Identity<'_> {
        Identity::Check {
            model_name: self.model_name,
            model: self.model,
            mesh_name: self.mesh_name,
            mesh: &self.mesh,
            dtype: self.cell.dtype,
            level,
            training: self.training,
            device: self.cell.device,
        }
    }

    /// The identity of the cell's run with `mutation` injected.
    pub fn mutation<'a>(&'a self, mutation: &'a str) -> Identity<'a> {
        Identity::Mutation {
            model_name: self.model_name,
            model: self.model,
            mesh_name: self.mesh_name,
            mesh: &self.mesh,
            dtype: self.cell.dtype,
            mutation,
            training: self.training,
            device: self.cell.device,
        }
    }
}
