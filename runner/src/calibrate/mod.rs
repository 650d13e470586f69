//! `meshparity calibrate`: measure, rather than assume, that a spec's gates separate round-off
//! from bugs. The correct matrix and every selected mutation run over many seeds (and, if
//! asked, other dtypes, optimizers and learning rates); the result says per (mesh, level) how
//! close correct runs came to their limits (**headroom**) and per (mutation, mesh) how far past
//! them the injected bug went (**margin**), with limits to consider where either is thin.
//!
//! Jobs run in this process, each mesh trained once per seed and judged at all its levels, so a
//! sweep of the quickstart costs about a second per seed on two cores.
//!
//! - `units.rs` — the plan's jobs grouped into what one seed runs (a reference, its meshes);
//! - `sweep.rs` — running the units over seeds and configurations;
//! - `summary.rs` — samples → headroom, margin and suggested limits;
//! - `power.rs` — sized perturbations (`--power`) → the smallest each level catches.

pub mod power;
mod summary;
pub(crate) mod sweep;
mod units;

use std::path::PathBuf;

use meshparity_specs::{DType, Optimizer};

pub use summary::summarize;
pub use sweep::{sweep, Sample, SweepError};
pub use units::{units, Unit, UnitError};

/// Training settings a sweep overrides across the whole matrix (`None`: as the spec says).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Config {
    pub dtype: Option<DType>,
    pub optimizer: Option<Optimizer>,
    pub lr: Option<f64>,
}

impl Config {
    /// `f32 adamw lr=1e-3`, or `spec` when nothing is overridden.
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if let Some(d) = self.dtype {
            parts.push(d.to_string());
        }
        if let Some(o) = self.optimizer {
            parts.push(match o {
                Optimizer::Sgd => "sgd".to_owned(),
                Optimizer::Adamw => "adamw".to_owned(),
            });
        }
        if let Some(lr) = self.lr {
            parts.push(format!("lr={lr:e}"));
        }
        if parts.is_empty() {
            "spec".into()
        } else {
            parts.join(" ")
        }
    }

    /// Every combination of the values given (an empty list keeps the spec's value).
    pub fn product(dtypes: &[DType], optimizers: &[Optimizer], lrs: &[f64]) -> Vec<Config> {
        let mut out = Vec::new();
        for dtype in opt(dtypes) {
            for optimizer in opt(optimizers) {
                for lr in opt(lrs) {
                    out.push(Config {
                        dtype,
                        optimizer,
                        lr,
                    });
                }
            }
        }
        out
    }
}

/// Each value as `Some`, or a single `None` (keep the spec's) for an empty list.
fn opt<T: Copy>(v: &[T]) -> Vec<Option<T>> {
    if v.is_empty() {
        vec![None]
    } else {
        v.iter().copied().map(Some).collect()
    }
}

/// What a sweep runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Seeds `first_seed .. first_seed + seeds`.
    pub seeds: u64,
    pub first_seed: u64,
    pub configs: Vec<Config>,
    /// Scratch space for artifacts; each unit's directory is removed when it is judged.
    pub scratch: PathBuf,
    /// Run the mutations on the first N seeds only (`None`: on every seed). The false-positive
    /// claim needs many seeds; a bug that is caught by a wide margin needs fewer.
    pub mutation_seeds: Option<u64>,
    /// Localize every mutation run (the detection table's site column).
    pub localize: bool,
    /// Judge each mutation run only up to the stage that catches it
    /// ([`meshparity_judge::check_until_caught`]): most runs then train one or two steps, and
    /// a margin is that of the levels judged, not of every level.
    pub first_catch: bool,
    /// CPU slots (`-j`, default the cores): work items run at once within them, one of a user's
    /// program taking a slot per rank it launches (as `run` counts them), one of the built-in
    /// engine one slot (its ranks share this process's threads, of which there are as many).
    pub slots: usize,
}
