//! meshparity's burn reference backend (work in progress, see issue 4).
//!
//! Built so far: deterministic data and init ([`rng`], [`data`]), the single-device `llama`
//! model ([`llama`]) that is the oracle for every mesh, host tensors and checkpoints ([`host`],
//! [`checkpoint`]) and sharding plans with exact shard/merge ([`sharding`]). Still to come:
//! simulated ranks and explicit collectives, the parallel layers (DP/TP/SP/PP), the check levels
//! as jobs, and mutations. burn is a dependency of this crate only.

pub mod checkpoint;
pub mod data;
pub mod host;
pub mod levels;
pub mod llama;
pub mod optim;
pub mod parallel;
pub mod rng;
pub mod sharding;
pub mod train;
