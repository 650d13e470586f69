//! Cells of a spec with `[variants]`: a command model's versions judged against each other on
//! the same mesh, instead of against world size 1. Per (model, mesh): one train job per variant
//! (two for a baseline with `repeats = 2`), then every other variant's levels judged against the
//! baseline's run, then that variant's mutations.

use meshparity_specs::{Cell, Level, ModelConfig, Spec, Training};
use petgraph::graph::NodeIndex;

use super::build::Plan;
use super::cell_key::CellKey;
use super::job::{Job, JobId, JobKind};

impl Plan {
    pub(super) fn variant_cell(
        &mut self,
        cell: &Cell<'_>,
        model_config: &ModelConfig,
        training: &Training,
        spec: &Spec,
    ) {
        let key = CellKey::new(cell, model_config, training);
        // A checkpoint roundtrip has no meaning between two versions of a program.
        let levels: Vec<Level> = cell
            .levels
            .iter()
            .map(|l| l.level)
            .filter(|l| *l != Level::Roundtrip)
            .collect();
        let job = |id, name, kind, variant: &str, repeat| Job {
            variant: Some(variant.to_owned()),
            repeat,
            ..key.job(id, name, kind)
        };
        let prefix = &key.prefix;
        let mut baseline: Vec<NodeIndex> = Vec::new();
        for (i, variant) in spec.variants.values().enumerate() {
            let name = variant.name.value.as_str();
            let git = variant.git.as_ref().map(|g| g.value.as_str());
            let repeats = if i == 0 { variant.repeats } else { 1 };
            let mut trains = Vec::new();
            for repeat in 1..=repeats {
                let id = JobId::of(&(key.train(&levels), name, git, repeat));
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
                let id = JobId::of(&(key.check(l.level), name, git));
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
                .filter(|m| m.applies_to(key.model_name, &key.mesh, training))
            {
                let mutation = m.name.value.clone();
                let id = JobId::of(&(key.mutation(&mutation), name, git));
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
