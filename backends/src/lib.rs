//! meshparity's burn reference backend: built-in models on simulated ranks with explicit
//! collectives, and the check levels as jobs. burn is a dependency of this crate only; the rest
//! of meshparity sees [`Backend`].
//!
//! - [`rng`], [`data`] — deterministic init and synthetic batches that expose bugs;
//! - [`llama`] — the single-device dense model, the oracle;
//! - [`host`], [`checkpoint`], [`sharding`] — host tensors, safetensors, sharding plans;
//! - [`parallel`] — collectives, segment-wise autodiff, TP/SP/DP/PP, schedules, faults;
//! - [`optim`], [`train`] — SGD/AdamW and training runs (oracle and mesh);
//! - [`levels`] — reference artifacts, roundtrip/forward/curve/oracle, mutation jobs;
//! - [`device`] — the CPU and the machine's GPU adapters, and which burn device each is.

pub mod backend;
pub mod checkpoint;
pub mod data;
pub mod device;
pub mod host;
pub mod levels;
pub mod llama;
pub mod optim;
pub mod parallel;
pub mod rng;
pub mod sharding;
pub mod train;

pub use backend::Backend;
pub use device::{Adapter, DeviceError, GPU_BUILT};
