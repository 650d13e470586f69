//! Cells of a spec with `[variants]`: a command model's versions judged against each other on
//! the same mesh, instead of against world size 1. Per (model, mesh): one train job per variant
//! (two for a baseline with `repeats = 2`), then every other variant's levels judged against the
//! baseline's run, then that variant's mutations.

use meshparity_specs::{Cell, Level, ModelConfig, Spec, Training};
use petgraph::graph::NodeIndex;

use super::build::{Identity, Plan};
use super::job::{Job, JobId, JobKind};

impl Plan {
    pub(super) fn variant_cell(
        &mut self,
        cell: &Cell<'_>,
        model_config: &ModelConfig,
        training: &Training,
        spec: &Spec,
    ) {
        let model_name = cell.model.name.value.as_str();
        let mesh_name = cell.mesh.name.value.as_str();
        let mesh = cell.mesh.config();
        let prefix = format!("{model_name}@{}/{mesh_name}", cell.dtype);
        // A checkpoint roundtrip has no meaning between two versions of a program.
        let levels: Vec<Level> = cell
            .levels
            .iter()
            .map(|l| l.level)
            .filter(|l| *l != Level::Roundtrip)
            .collect();
        let job = |id, name, kind, variant: &str, repeat| Job {
            id,
            name,
            kind,
            models: vec![model_name.to_owned()],
            mesh: Some(mesh_name.to_owned()),
            mesh_tag: Some(mesh.tag(cell.dtype)),
            dtype: cell.dtype,
            world_size: mesh.world_size(),
            model_config: model_config.clone(),
            mesh_config: Some(mesh),
            tolerance: None,
            limits: None,
            training: training.clone(),
            device: cell.device,
            variant: Some(variant.to_owned()),
            repeat,
        };
        let mut baseline: Vec<NodeIndex> = Vec::new();
        for (i, variant) in spec.variants.values().enumerate() {
            let name = variant.name.value.as_str();
            let git = variant.git.as_ref().map(|g| g.value.as_str());
            let repeats = if i == 0 { variant.repeats } else { 1 };
            let mut trains = Vec::new();
            for repeat in 1..=repeats {
                let identity = Identity::Train {
                    model_name,
                    model: model_config,
                    mesh_name,
                    mesh: &mesh,
                    dtype: cell.dtype,
                    levels: &levels,
                    training,
                    device: cell.device,
                };
                let id = JobId::of(&(identity, name, git, repeat));
                let suffix = if repeat > 1 {
                    format!("#{repeat}")
                } else {
                    String::new()
                };
                let kind = JobKind::Train {
                    levels: levels.clone(),
                };
                let job = job(
                    id,
                    format!("{prefix}/{name}/train{suffix}"),
                    kind,
                    name,
                    repeat,
                );
                trains.push(self.add(job, &[]));
            }
            if i == 0 {
                baseline = trains;
                continue;
            }
            let mut prev = trains[0];
            for l in cell.levels.iter().filter(|l| levels.contains(&l.level)) {
                let identity = Identity::Check {
                    model_name,
                    model: model_config,
                    mesh_name,
                    mesh: &mesh,
                    dtype: cell.dtype,
                    level: l.level,
                    training,
                    device: cell.device,
                };
                let id = JobId::of(&(identity, name, git));
                let kind = JobKind::Check { level: l.level };
                let mut j = job(id, format!("{prefix}/{name}/{}", l.level), kind, name, 1);
                j.tolerance = Some(l.table.to_owned());
                j.limits = Some(l.limits.clone());
                let mut deps = vec![prev, trains[0]];
                deps.extend(&baseline);
                prev = self.add(j, &deps);
            }
            if !cell.mutations {
                continue;
            }
            let Some(engine) = spec.engine_of(model_config) else {
                continue;
            };
            for m in engine
                .mutations
                .iter()
                .filter(|m| m.applies_to(model_name, &mesh, training))
            {
                let mutation = m.name.value.clone();
                let identity = Identity::Mutation {
                    model_name,
                    model: model_config,
                    mesh_name,
                    mesh: &mesh,
                    dtype: cell.dtype,
                    mutation: &mutation,
                    training,
                    device: cell.device,
                };
                let id = JobId::of(&(identity, name, git));
                let job_name = format!("{prefix}/{name}/mutation[{mutation}]");
                let kind = JobKind::Mutation {
                    mutation,
                    levels: levels.clone(),
                };
                let mut deps = vec![prev];
                deps.extend(&baseline);
                self.add(job(id, job_name, kind, name, 1), &deps);
            }
        }
    }
}
