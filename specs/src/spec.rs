//! The merged, validated spec: what the planner expands into jobs.

use std::path::PathBuf;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::dtype::DType;
use crate::level::Level;
use crate::matrix::MatrixEntry;
use crate::mesh::Mesh;
use crate::model::Model;
use crate::mutation::MutationSelection;
use crate::run::RunSettings;
use crate::source::{Loc, SourceFile};
use crate::tolerance::{Limits, ToleranceTable, BUILTIN};

#[derive(Debug)]
pub struct Spec {
    /// The top-level spec file.
    pub path: PathBuf,
    /// Every file read, the top-level one first, for hashing and messages.
    pub files: Vec<Arc<SourceFile>>,
    pub run: RunSettings,
    pub models: IndexMap<String, Model>,
    pub meshes: IndexMap<String, Mesh>,
    /// Includes the built-in table under [`BUILTIN`].
    pub tolerances: IndexMap<String, ToleranceTable>,
    /// As written; a spec without `[[matrix]]` gets [`MatrixEntry::everything`].
    pub matrix: Vec<MatrixEntry>,
    pub mutations: MutationSelection,
    pub loc: Loc,
}

impl Spec {
    /// The run name: `[run] name`, else the file stem.
    pub fn name(&self) -> String {
        self.run.name.clone().unwrap_or_else(|| {
            self.path
                .file_stem()
                .map_or_else(|| "spec".to_owned(), |s| s.to_string_lossy().into_owned())
        })
    }

    pub fn model_dtype(&self, model: &Model) -> DType {
        model
            .dtype
            .as_ref()
            .map_or(self.run.dtype.value, |d| d.value)
    }

    /// The table a matrix entry without `tolerance` uses: the user's `default`, else the built-in.
    pub fn default_tolerance(&self) -> &str {
        if self.tolerances.contains_key("default") {
            "default"
        } else {
            BUILTIN
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
