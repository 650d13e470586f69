//! meshparity's engine contract, free of any numeric backend and of any judging: what an engine
//! implements and what it writes. The engines (the burn backends, the command engine) depend on
//! this crate only; the judging of what they wrote is `meshparity-judge`'s.
//!
//! - [`engine`] — the [`Engine`] trait an engine implements (describe, supports, reference,
//!   run, trace) and the [`RunRequest`] it is handed;
//! - [`artifact`] — the on-disk contract: artifact file names and the run [`Manifest`];
//! - [`seal`] — content hashes of a finished run directory, verified before reuse or judging;
//! - [`tensor`], [`checkpoint`], [`sharded`] — host tensors as bytes, safetensors files of
//!   them, and a checkpoint sharded over ranks with an index of each shard's slice;
//! - [`trace`] — the per-site trace an engine writes for localization (and the trace level);
//! - [`traced`] — runs that wrote their trace as they trained, for a later trace to copy;
//! - [`inputs`] — the rows each rank trained on, per step, as digests;
//! - [`routing`] — the moe family's routing artifact;
//! - [`replay`] — the reference's routing that mesh runs replay;
//! - [`optimizer`] — world size 1's optimizer (constants, decay groups, the update) and the
//!   optimizer step an engine records for the judge to replay;
//! - [`shell`] — shell words for command lines a user can paste;
//! - [`heap`] — the process heap's live and peak bytes, counted where the binary asks.

pub mod artifact;
pub mod checkpoint;
pub mod engine;
pub mod heap;
pub mod inputs;
pub mod optimizer;
pub mod replay;
pub mod routing;
pub mod seal;
pub mod sharded;
pub mod shell;
pub mod tensor;
pub mod trace;
pub mod traced;

pub use artifact::{files, ArtifactError, Manifest};
pub use engine::{Description, Engine, EngineError, Length, RunRequest};
pub use seal::{seal, sealed, verify, verify_file, SealError};
pub use tensor::{HostTensor, Shards};
pub use trace::{write_trace, LeftOut, TraceEntry, TraceError, TraceIndex};
