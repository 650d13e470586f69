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
//!
//! Modules:
//!
//! - [`catalog`] — the mutation catalog;
//! - [`device`] — where a job computes;
//! - [`diagnostic`] — problems found in a spec, each tied to the place that has to change;
//! - [`document`] — one spec file decoded into its elements, before includes are merged;
//! - [`dtype`] — floating-point formats a model can run in;
//! - [`engine`] — `[engines.NAME]`: a user's own training program as an engine;
//! - [`env`] — environment tables of an engine or executor: string values, variable names;
//! - [`engine_shrink`] — `[engines.NAME.shrink]`: which of a command engine's values shrink
//!   may lower;
//! - [`executor`] — `[executor]`: where a run's jobs execute (local processes, Slurm);
//! - [`family`] — built-in model families and what each can be checked for;
//! - [`features`] — the production features of `[run]` (issue 36);
//! - [`fit`] — whether a mesh's degrees divide a model's shapes;
//! - [`log_pattern`] — how a command engine reads a loss curve from its program's log
//!   (`artifacts.log`);
//! - [`mesh`] — `[meshes.NAME]`: a parallel layout;
//! - [`moe`] — the `moe` family's router and capacity options;
//! - [`mutation`] — `[mutations]`: which catalogued bugs a spec injects;
//! - [`names`] — the names a spec gives its tables, checked once for every kind;
//! - [`performance`] — which metrics of a curve are performance figures;
//! - [`resume`] — `[[resume]]`: a checkpoint saved on one mesh and resumed on another;
//! - [`run`] — `[run]`: settings shared by every job of a spec;
//! - [`schedule`] — `[run]`'s learning-rate schedule and weight decay;
//! - [`schema`] — JSON Schema of the spec format, for editors (taplo / Even Better TOML, Tombi);
//! - [`suggest`] — "Did you mean" suggestions for misspelt keys and names;
//! - [`template`] — the template language of a command engine's `program`, `args`, `env` and
//!   `cwd`;
//! - [`variant`] — `[variants.NAME]`: versions of a user's program judged against each other.

pub mod catalog;
pub mod decode;
pub mod device;
pub mod diagnostic;
pub mod document;
pub mod dtype;
pub mod engine;
pub mod engine_shrink;
pub mod env;
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
pub mod names;
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
pub use model::{ModelConfig, MTP_LOSS_SCALE};
pub use moe::{AuxNormalization, DropPolicy, MoeOptions, RouterScore};
pub use mutation::{Mutation, CATALOG};
pub use resume::ResumeFrom;
pub use run::{Dropout, Optimizer, Packing, Recompute, Training};
pub use source::{Loc, Located, SourceFile};
pub use spec::Spec;
pub use support::{Field, Unsupported};
pub use tolerance::{CurveMode, Limits, TRACE_RATIOS};
pub use variant::Variant;
