//! meshparity's burn reference backend (work in progress, see issue 4).
//!
//! Built so far: deterministic data and init ([`rng`], [`data`]) and the single-device `llama`
//! model ([`llama`]) that is the oracle for every mesh. Still to come: simulated ranks and
//! explicit collectives, the parallel layers (DP/TP/SP/PP), sharding plans, the check levels
//! as jobs, and mutations. burn is a dependency of this crate only.

pub mod data;
pub mod llama;
pub mod rng;
