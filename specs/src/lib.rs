//! meshparity spec files: the data model, TOML loading with spans, validation and matrix
//! expansion.
//!
//! A spec declares models, meshes, tolerance tables, a matrix selecting which of them to check
//! at which levels, and mutations to inject. [`load`] reads a spec and its includes and either
//! returns a valid [`Spec`] or *every* problem found, each with file:line:column and the source
//! line underlined. [`Spec::cells`] expands the matrix for the planner.
//!
//! Loading passes: parse (recovering from TOML syntax errors) → decode each file by hand
//! ([`decode`], so one pass reports all unknown keys and type errors) → merge includes →
//! [`validate`] (divisibility, level support, tolerances, names) via [`expand`].

pub mod catalog;
pub mod decode;
pub mod device;
pub mod diagnostic;
pub mod document;
pub mod dtype;
pub mod engine;
pub mod engine_checks;
pub mod engine_shrink;
pub mod executor;
pub mod expand;
pub mod family;
pub mod features;
pub mod fit;
pub mod level;
pub mod load;
pub mod log_pattern;
pub mod matrix;
pub mod mesh;
pub mod model;
pub mod moe;
pub mod mutation;
pub mod performance;
pub mod resume;
pub mod run;
pub mod schedule;
pub mod schema;
pub mod source;
pub mod spec;
pub mod suggest;
pub mod support;
pub mod template;
pub mod tolerance;
pub mod validate;
pub mod variant;

pub use decode::Keyword;
pub use device::Device;
pub use diagnostic::{Diagnostic, Diagnostics, Severity};
pub use dtype::DType;
pub use engine::{ArtifactMap, EngineDef, EngineMutation};
pub use executor::{ExecutorDef, ExecutorKindName};
pub use expand::{Cell, CellLevel};
pub use family::Family;
pub use level::Level;
pub use load::{load, load_text, load_with, Disk, Files, Loaded, SpecError};
pub use mesh::{Coord, MeshConfig, Schedule};
pub use model::ModelConfig;
pub use moe::{AuxNormalization, DropPolicy, MoeOptions, RouterScore};
pub use mutation::{Mutation, CATALOG};
pub use resume::ResumeFrom;
pub use run::{Dropout, Optimizer, Packing, Recompute, Training};
pub use source::{Loc, Located, SourceFile};
pub use spec::Spec;
pub use support::{Field, Unsupported};
pub use tolerance::{CurveMode, Limits};
pub use variant::Variant;
