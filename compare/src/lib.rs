//! meshparity's comparison engine: two checkpoints (safetensors, single or sharded) or two
//! metric curves (JSON Lines), compared exactly about what was compared.
//!
//! Order of judgement: structural problems first and always fatal (missing/extra names, shape or
//! dtype mismatch, NaN/Inf, an all-zero candidate, missing/duplicate steps); then metrics per
//! tensor from one parallel pass (f64 accumulation); then gating by tolerance (profiles,
//! per-tensor glob overrides, layer averaging). Comparing nothing is an error, never a match.
//!
//! Files: `safetensors/` (format), `checkpoint.rs` (single/sharded), `scan.rs` (the kernel),
//! `metrics.rs`, `agreement.rs` (logits, routing), `tolerance.rs`, `options.rs` (what a
//! comparison is asked), `tensors.rs`, `align.rs`
//! (`--rename`, `--cast`), `curve/` (reading, comparing), `report.rs` (data), `render.rs` (text).

pub mod agreement;
pub mod align;
pub mod checkpoint;
pub mod curve;
pub mod dtype;
pub mod error;
pub mod metrics;
pub mod options;
pub mod render;
pub mod report;
pub mod safetensors;
pub mod scan;
pub mod tensors;
pub mod tolerance;

pub use align::{OptionError, Rename};
pub use checkpoint::Checkpoint;
pub use curve::{compare_curves, read_curve, CurveOptions};
pub use dtype::TensorDtype;
pub use error::InputError;
pub use report::{CurveReport, TensorReport, Verdict};
pub use tensors::{compare_checkpoints, TensorOptions};
pub use tolerance::{Profile, Tolerance};
