//! What ranks exchange and what is recorded of it.
//!
//! - `collective.rs` — the communicator: every call logged by site, faults injected there;
//! - `tape.rs` — segments between collectives, backward with Megatron's conjugates;
//! - `conj.rs` — the conjugate pairs: what a collective does forward and to gradients;
//! - `recompute.rs` — spans of the tape whose forward backward runs again (activation recompute);
//! - `route.rs` — rows moved between ranks (the experts' all-to-all, unequal gathers);
//! - `trace.rs` — per-site values in their world-size-1 form, for localization.

pub mod collective;
mod conj;
pub mod recompute;
pub mod route;
pub mod tape;
pub mod trace;
