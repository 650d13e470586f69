//! Matrix cells → jobs and edges.

use std::collections::HashMap;

use meshparity_specs::{Cell, Level, ModelConfig, Spec, Training};
use petgraph::graph::{DiGraph, NodeIndex};

use super::cell_key::CellKey;
use super::identity::Identity;
use super::job::{Job, JobId, JobKind};

/// The job DAG of a spec. Nodes are in plan order: every job after its dependencies.
#[derive(Debug)]
pub struct Plan {
    pub spec_name: String,
    pub graph: DiGraph<Job, ()>,
    by_id: HashMap<JobId, NodeIndex>,
}

impl Plan {
    /// A plan with no jobs yet.
    pub(super) fn empty(spec_name: String) -> Plan {
        Plan {
            spec_name,
            graph: DiGraph::new(),
            by_id: HashMap::new(),
        }
    }

    /// Expand a valid spec into its job DAG.
    pub fn build(spec: &Spec) -> Plan {
        let mut plan = Plan::empty(spec.name());
        let training = &spec.run.training;
        let mut reference_training: HashMap<String, Training> = HashMap::new();
        let cells = spec.cells();
        let mut references: HashMap<JobId, NodeIndex> = HashMap::new();
        for cell in &cells {
            let model_config = cell.model.config();
            if spec.baseline().is_some() && spec.engine_of(&model_config).is_some() {
                plan.variant_cell(cell, &model_config, training, spec);
                continue;
            }
            let reference_config = cell.model.reference_config();
            let name = &cell.model.name.value;
            let training = reference_training
                .entry(name.clone())
                .or_insert_with(|| spec.reference_training(name));
            let reference = plan.reference(&mut references, cell, &reference_config, training);
            let on_mesh = spec.training_on(cell.mesh);
            plan.cell(cell, reference, &model_config, &on_mesh, spec);
        }
        plan
    }

    pub(super) fn add(&mut self, job: Job, deps: &[NodeIndex]) -> NodeIndex {
        let id = job.id;
        let node = self.graph.add_node(job);
        for (i, &d) in deps.iter().enumerate() {
            if !deps[..i].contains(&d) {
                self.graph.add_edge(d, node, ());
            }
        }
        self.by_id.insert(id, node);
        node
    }

    fn reference(
        &mut self,
        references: &mut HashMap<JobId, NodeIndex>,
        cell: &Cell<'_>,
        config: &ModelConfig,
        training: &Training,
    ) -> NodeIndex {
        let id = JobId::of(&Identity::Reference {
            format: super::identity::REFERENCE_FORMAT,
            model: config,
            dtype: cell.dtype,
            training,
            device: cell.device,
        });
        let name = &cell.model.name.value;
        if let Some(&node) = references.get(&id) {
            let job = &mut self.graph[node];
            if !job.models.contains(name) {
                job.models.push(name.clone());
            }
            return node;
        }
        let job = Job {
            id,
            name: format!("{name}@{}/reference", cell.dtype),
            kind: JobKind::Reference,
            models: vec![name.clone()],
            mesh: None,
            mesh_tag: None,
            dtype: cell.dtype,
            world_size: 1,
            model_config: config.clone(),
            mesh_config: None,
            tolerance: None,
            limits: None,
            training: training.clone(),
            device: cell.device,
            variant: None,
            repeat: 1,
        };
        let node = self.add(job, &[]);
        references.insert(id, node);
        node
    }

    fn cell(
        &mut self,
        cell: &Cell<'_>,
        reference: NodeIndex,
        model_config: &ModelConfig,
        training: &Training,
        spec: &Spec,
    ) {
        let key = CellKey::new(cell, model_config, training);
        // A resumed run is tagged with where it resumed from, and holds its first mesh's ranks,
        // then its second's.
        let base = |id, name, kind| {
            let mut job = key.job(id, name, kind);
            if let Some(r) = &training.resume {
                job.mesh_tag = Some(format!(
                    "{}-resumed-from-{}-at{}",
                    key.mesh.tag(cell.dtype),
                    r.mesh,
                    r.at
                ));
                job.world_size = job.world_size.max(r.config.world_size());
            }
            job
        };
        let levels: Vec<Level> = cell.levels.iter().map(|l| l.level).collect();
        let id = JobId::of(&key.train(&levels));
        let kind = JobKind::Train {
            levels: levels.clone(),
        };
        let waits = trains_on_reference(model_config, spec);
        let train_deps: &[NodeIndex] = if waits { &[reference] } else { &[] };
        let prefix = &key.prefix;
        let train = self.add(base(id, format!("{prefix}/train"), kind), train_deps);
        let mut prev = train;
        for l in &cell.levels {
            let id = JobId::of(&key.check(l.level));
            let mut job = base(
                id,
                format!("{prefix}/{}", l.level),
                JobKind::Check { level: l.level },
            );
            job.tolerance = Some(l.table.to_owned());
            job.limits = Some(l.limits.clone());
            // The first level waits for the reference too (the train job may not have).
            let after = if prev == train { reference } else { prev };
            prev = self.add(job, &[after, train]);
        }
        if !cell.mutations {
            return;
        }
        for name in mutation_names(spec, &key) {
            let id = JobId::of(&key.mutation(&name));
            let job_name = format!("{prefix}/mutation[{name}]");
            let kind = JobKind::Mutation {
                mutation: name,
                levels: levels.clone(),
            };
            self.add(base(id, job_name, kind), &[prev]);
        }
    }

    pub fn len(&self) -> usize {
        self.graph.node_count()
    }

    pub fn is_empty(&self) -> bool {
        self.graph.node_count() == 0
    }

    /// Jobs in plan (topological) order.
    pub fn jobs(&self) -> impl Iterator<Item = (NodeIndex, &Job)> {
        self.graph.node_indices().map(|n| (n, &self.graph[n]))
    }

    pub fn node(&self, id: JobId) -> Option<NodeIndex> {
        self.by_id.get(&id).copied()
    }

    /// Direct dependencies of a job, in plan order.
    pub fn dependencies(&self, node: NodeIndex) -> Vec<NodeIndex> {
        let mut deps: Vec<NodeIndex> = self
            .graph
            .neighbors_directed(node, petgraph::Direction::Incoming)
            .collect();
        deps.sort();
        deps
    }
}

/// Whether a mesh's training reads its reference's artifacts, so must wait for it: a user's
/// program may be handed the reference's seed checkpoint (`{{seed_checkpoint}}`), and a moe
/// model's meshes replay the reference's routing. The built-in engine makes the seed
/// checkpoint itself from the seed, so a dense model's meshes train beside their reference
/// (on a machine with free slots, the run's length is the longest training, not the
/// reference's plus a mesh's); its levels still wait for both.
fn trains_on_reference(model: &ModelConfig, spec: &Spec) -> bool {
    spec.engine_of(model).is_some() || model.replays_routing()
}

/// The bugs a cell's mutation jobs inject: those its engine declares for a user's program, the
/// catalog's selected ones for the built-in engine; each where it applies.
fn mutation_names(spec: &Spec, key: &CellKey<'_>) -> Vec<String> {
    match spec.engine_of(key.model) {
        Some(engine) => engine
            .mutations
            .iter()
            .filter(|m| m.applies_to(key.model_name, &key.mesh, key.training))
            .map(|m| m.name.value.clone())
            .collect(),
        None => spec
            .mutations
            .selected
            .iter()
            .filter(|m| m.applies_to(key.model, &key.mesh, key.training))
            .map(|m| m.name.to_owned())
            .collect(),
    }
}
