//! meshparity's burn engine: built-in models on simulated ranks with explicit collectives,
//! writing the artifact contract of [`meshparity_engine`]. burn is a dependency of this crate
//! only; the rest of meshparity sees a [`meshparity_engine::Engine`].
//!
//! - [`rng`], [`data`] — deterministic init and synthetic batches that expose bugs;
//! - [`dropout`] — dropout masks as a function of the global position they act at;
//! - [`llama`] — the single-device dense model, the oracle;
//! - [`positions`] — where a rank's tokens sit in their rows (row or per-document CP layout);
//! - [`host`], [`sharding`] — host tensors to and from burn, sharding plans;
//! - [`parallel`] — collectives, segment-wise autodiff, TP/SP/DP/PP, schedules, faults;
//! - [`optim`], [`train`] — SGD/AdamW and training runs (oracle and mesh);
//! - [`levels`] — the reference's and a mesh run's artifacts (the engine contract);
//! - [`support`] — what this engine computes, asked before anything runs;
//! - [`memory`] — how much memory a run needs, refused up front when the machine has less;
//! - [`device`] — the CPU and the machine's GPU adapters, and which burn device each is;
//! - [`backend`] — the burn engine as the rest of meshparity sees it: an `Engine` on a device.

pub mod backend;
pub mod data;
pub mod device;
pub mod dropout;
pub mod host;
pub mod levels;
pub mod llama;
pub mod memory;
pub mod optim;
pub mod parallel;
pub mod positions;
pub mod rng;
pub mod sharding;
pub mod support;
pub mod train;

pub use backend::Backend;
pub use device::{Adapter, DeviceError, GPU_BUILT};
