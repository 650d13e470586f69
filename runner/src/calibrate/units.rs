//! The plan's selected jobs, grouped into what one seed runs: a reference (model configuration
//! and dtype) and, per mesh, the levels with their limits and the mutations to inject.

use meshparity_specs::{DType, Level, Limits, MeshConfig, ModelConfig, Spec, Training};

use super::Config;
use crate::plan::{Job, JobKind, Plan, Selection};

/// One reference and every mesh judged against it.
#[derive(Clone, Debug)]
pub struct Unit {
    pub model: String,
    pub model_config: ModelConfig,
    pub dtype: DType,
    /// The reference's training (every mesh's, less a pair's resumption: [`MeshUnit::resume`]).
    pub training: Training,
    pub device: meshparity_specs::Device,
    pub meshes: Vec<MeshUnit>,
}

/// One mesh of a unit.
#[derive(Clone, Debug)]
pub struct MeshUnit {
    pub name: String,
    pub config: MeshConfig,
    pub levels: Vec<(Level, Limits)>,
    pub mutations: Vec<String>,
    /// A `[[resume]]` pair's mesh: where it resumes from (each pair its own).
    pub resume: Option<meshparity_specs::ResumeFrom>,
}

impl MeshUnit {
    /// This mesh's training: the unit's, resumed where the mesh is a pair's.
    pub fn training(&self, unit: &Training) -> Training {
        Training {
            resume: self.resume.clone(),
            ..unit.clone()
        }
    }

    /// Judge `level` under `limits` (once; levels kept in DAG order).
    fn judge(&mut self, level: Level, limits: Limits) {
        if !self.levels.iter().any(|(l, _)| *l == level) {
            self.levels.push((level, limits));
            self.levels.sort_by_key(|(l, _)| *l);
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error(
        "tolerance table `{table}` has no limits for {level} in {dtype} \
         (add `{level}.{dtype}` to it, or calibrate another dtype)"
    )]
    NoLimits {
        table: String,
        level: Level,
        dtype: DType,
    },
}

/// Group the selected check and mutation jobs by reference, with `config`'s overrides applied
/// (limits of another dtype come from the same tolerance table).
pub fn units(
    spec: &Spec,
    plan: &Plan,
    selection: &Selection,
    config: &Config,
) -> Result<Vec<Unit>, UnitError> {
    let mut out: Vec<Unit> = Vec::new();
    let mut states_at = std::collections::HashMap::new();
    // Dependencies too: a mutation is judged by the levels of its mesh, selected or not. Jobs
    // already in the target dtype go first, so a cell the spec writes in that dtype keeps its
    // own tolerance table (the sweep's `tight` f64 cells) over one converted from another dtype.
    let jobs: Vec<&Job> = selection
        .jobs
        .iter()
        .map(|&(n, _)| &plan.graph[n])
        .collect();
    let native = |j: &&Job| config.dtype.is_none_or(|d| d == j.dtype);
    let ordered = jobs
        .iter()
        .filter(|j| native(j))
        .chain(jobs.iter().filter(|j| !native(j)));
    for job in ordered {
        if job.kind == JobKind::Reference {
            continue;
        }
        let dtype = config.dtype.unwrap_or(job.dtype);
        // The reference's: no resumption, its whole state kept where the pairs are judged.
        let mut training = Training {
            resume: None,
            states_at: states_at
                .entry(job.model())
                .or_insert_with(|| spec.reference_training(job.model()).states_at)
                .clone(),
            ..job.training.clone()
        };
        if let Some(o) = config.optimizer {
            training.optimizer = o;
        }
        if let Some(lr) = config.lr {
            training.lr = lr;
        }
        let i = match out.iter().position(|u| {
            u.model_config == job.model_config
                && u.dtype == dtype
                && u.device == job.device
                && u.model == job.model()
        }) {
            Some(i) => i,
            None => {
                out.push(Unit {
                    model: job.model().to_owned(),
                    model_config: job.model_config.clone(),
                    dtype,
                    training,
                    device: job.device,
                    meshes: Vec::new(),
                });
                out.len() - 1
            }
        };
        add_job(spec, &mut out[i], job, dtype)?;
    }
    Ok(out)
}

fn add_job(spec: &Spec, unit: &mut Unit, job: &Job, dtype: DType) -> Result<(), UnitError> {
    let (Some(name), Some(config)) = (&job.mesh, &job.mesh_config) else {
        return Ok(());
    };
    let mesh = match unit.meshes.iter().position(|m| &m.name == name) {
        Some(i) => &mut unit.meshes[i],
        None => {
            unit.meshes.push(MeshUnit {
                name: name.clone(),
                config: *config,
                levels: Vec::new(),
                mutations: Vec::new(),
                resume: job.training.resume.clone(),
            });
            unit.meshes.last_mut().expect("just pushed")
        }
    };
    match &job.kind {
        JobKind::Check { level } => {
            let table = job.tolerance.clone().unwrap_or_default();
            let converted = |level: Level| spec.limits(&table, level, dtype).map(|(_, l)| l);
            let limits = if dtype == job.dtype {
                job.limits.clone().unwrap_or_default()
            } else if let Some(l) = converted(*level) {
                l.clone()
            } else if *level == Level::Trace {
                // Judged where the table gates it (as the planner implies it): not in this dtype.
                return Ok(());
            } else {
                return Err(UnitError::NoLimits {
                    table,
                    level: *level,
                    dtype,
                });
            };
            mesh.judge(*level, limits);
            // The planner adds `trace` beside `oracle` where the cell's dtype is gated for it; a
            // cell calibrated in another dtype gets it here by the same rule.
            let engine = spec.engine_of(&job.model_config);
            let traces = engine.is_none_or(|e| e.artifacts.trace.is_some());
            let implied = job.model_config.family.trace_implied(engine.is_some());
            let traced = traces && implied && job.training.resume.is_none();
            if *level == Level::Oracle && dtype != job.dtype && traced {
                if let Some(l) = converted(Level::Trace) {
                    mesh.judge(Level::Trace, l.clone());
                }
            }
        }
        JobKind::Mutation { mutation, .. } => {
            // The plan paired the bug with the spec's training; a configuration may change
            // what it needs (no AdamW moments to corrupt under SGD).
            let training = mesh.training(&unit.training);
            let applies = match meshparity_specs::catalog::find(mutation) {
                Some(m) => m.applies_to(&unit.model_config, config, &training),
                // A command engine's own bug, by what its `needs` say.
                None => spec
                    .engine_of(&unit.model_config)
                    .and_then(|e| e.mutation(mutation))
                    .is_none_or(|m| m.applies_to(&unit.model, config, &training)),
            };
            if applies && !mesh.mutations.contains(mutation) {
                mesh.mutations.push(mutation.clone());
            }
        }
        JobKind::Reference | JobKind::Train { .. } => {}
    }
    Ok(())
}
