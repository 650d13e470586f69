//! The merged, validated spec: what the planner expands into jobs.

use std::path::PathBuf;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::device::Device;
use crate::dtype::DType;
use crate::engine::EngineDef;
use crate::level::Level;
use crate::matrix::MatrixEntry;
use crate::mesh::Mesh;
use crate::model::Model;
use crate::mutation::MutationSelection;
use crate::run::RunSettings;
use crate::source::{Loc, SourceFile};
use crate::tolerance::{Limits, ToleranceTable, BUILTIN, BUILTIN_GPU, DEFAULT_GPU};

#[derive(Debug)]
pub struct Spec {
    /// The top-level spec file.
    pub path: PathBuf,
    /// Every file read, the top-level one first, for hashing and messages.
    pub files: Vec<Arc<SourceFile>>,
    pub run: RunSettings,
    pub models: IndexMap<String, Model>,
    pub meshes: IndexMap<String, Mesh>,
    /// User programs as engines (`[engines.NAME]`); models without `engine` use the built-in one.
    pub engines: IndexMap<String, EngineDef>,
    /// Versions of the programs judged against each other; the first is the baseline.
    pub variants: IndexMap<String, crate::variant::Variant>,
    /// Includes the built-in tables under [`BUILTIN`] and [`BUILTIN_GPU`].
    pub tolerances: IndexMap<String, ToleranceTable>,
    /// As written; a spec without `[[matrix]]` gets [`MatrixEntry::everything`].
    pub matrix: Vec<MatrixEntry>,
    /// The meshes of `[[resume]]` pairs, by name ([`crate::resume`]): each joins the matrix
    /// entries that select its `from` mesh.
    pub resumed: IndexMap<String, Mesh>,
    pub mutations: MutationSelection,
    /// `[executor]`; the default runs jobs on this machine.
    pub executor: crate::executor::ExecutorDef,
    /// Names defined under a misspelled section (`[mesh.pp2]` for `[meshes.pp2]`), by the
    /// section meant: already reported as an unknown key, so a reference to one is not reported
    /// again as an unknown name.
    pub stray: Vec<(&'static str, String)>,
    pub loc: Loc,
}

impl Spec {
    /// The training of `mesh`'s jobs: the run's, resumed from another mesh for a
    /// `[[resume]]` pair's mesh.
    pub fn training_on(&self, mesh: &Mesh) -> crate::run::Training {
        crate::run::Training {
            resume: mesh.resume.clone(),
            ..self.run.training.clone()
        }
    }

    /// The training of `model`'s references: the run's, keeping their whole state after each
    /// checkpoint step of a `[[resume]]` pair the model is checked on, and after
    /// `oracle_steps` when it has any, which a pair's saved and final states are judged
    /// against. A model no pair includes is asked for none: a state nothing judges is a run
    /// (a program's, on a command engine) for nothing. Models whose references are equal share
    /// one reference job, so the states are those of every model with `model`'s reference
    /// configuration: two equal models, one of them paired, still share one job.
    pub fn reference_training(&self, model: &str) -> crate::run::Training {
        let mut training = self.run.training.clone();
        let config = self.models.get(model).map(|m| m.reference_config());
        let mut at: Vec<u32> = self
            .cells()
            .iter()
            .filter(|c| c.model.name.value == model || Some(c.model.reference_config()) == config)
            .filter_map(|c| Some(c.mesh.resume.as_ref()?.at))
            .collect();
        if !at.is_empty() {
            at.push(training.oracle_steps);
            at.sort_unstable();
            at.dedup();
        }
        training.states_at = at;
        training
    }

    /// The run name: `[run] name`, else the file stem.
    pub fn name(&self) -> String {
        self.run.name.clone().unwrap_or_else(|| {
            self.path
                .file_stem()
                .map_or_else(|| "spec".to_owned(), |s| s.to_string_lossy().into_owned())
        })
    }

    /// The baseline variant (the first declared), if the spec has variants.
    pub fn baseline(&self) -> Option<&crate::variant::Variant> {
        self.variants.values().next()
    }

    /// The command engine `model` runs on, if it names one.
    pub fn engine_of(&self, model: &crate::ModelConfig) -> Option<&EngineDef> {
        self.engines.get(model.engine.as_deref()?)
    }

    pub fn model_dtype(&self, model: &Model) -> DType {
        model
            .dtype
            .as_ref()
            .map_or(self.run.dtype.value, |d| d.value)
    }

    pub fn model_device(&self, model: &Model) -> Device {
        model
            .device
            .as_ref()
            .map_or(self.run.device.value, |d| d.value)
    }

    /// Every model on `device`: the command line's `--device` overrides the spec.
    pub fn set_device(&mut self, device: Device) {
        self.run.device.value = device;
        for model in self.models.values_mut() {
            model.device = None;
        }
    }

    /// The table a matrix entry without `tolerance` uses: on the CPU the user's `default`, else
    /// `builtin`; on a GPU the user's `default-gpu`, else `builtin-gpu` (GPU kernels sum in other
    /// orders than the CPU's, and a table tuned on one must not silently judge the other).
    pub fn default_tolerance(&self, device: Device) -> &str {
        let (user, builtin) = if device.is_gpu() {
            (DEFAULT_GPU, BUILTIN_GPU)
        } else {
            ("default", BUILTIN)
        };
        if self.tolerances.contains_key(user) {
            user
        } else {
            builtin
        }
    }

    /// Limits for (level, dtype) in `table` or what it extends; `None` if nothing defines them.
    pub fn limits(&self, table: &str, level: Level, dtype: DType) -> Option<(&str, &Limits)> {
        let mut name = table;
        for _ in 0..=self.tolerances.len() {
            let t = self.tolerances.get(name)?;
            if let Some(l) = t.get(level, dtype) {
                return Some((t.name.value.as_str(), &l.value));
            }
            name = t.extends.as_ref()?.value.as_str();
        }
        None
    }
}
