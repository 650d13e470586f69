//! meshparity's engine seam, free of any numeric backend: what a check means, for every engine.
//!
//! - [`engine`] — the [`Engine`] trait an engine implements (describe, supports, reference,
//!   run) and the [`RunRequest`] it is handed;
//! - [`artifact`] — the on-disk contract: artifact file names and the run [`Manifest`];
//! - [`seal`] — content hashes of a finished run directory, verified before reuse or judging;
//! - [`tensor`], [`checkpoint`], [`sharded`] — host tensors as bytes, safetensors files of
//!   them, and a checkpoint sharded over ranks with an index of each shard's slice;
//! - [`check`] — one mesh run judged at all its levels;
//! - [`judge`] — every level judged from a reference and a mesh run's artifact directories;
//! - [`gate`], [`outcome`], [`mutation`] — what a level found, with the evidence, and a
//!   mutation's expected failure;
//! - [`finding`] — a job's findings, typed, as results files store them;
//! - [`routing`] — the routing level: per-token expert sets against the reference's;
//! - [`replay`] — the reference's routing that mesh runs replay;
//! - [`update`] — weight updates, what the oracle level compares;
//! - [`optimizer`] — world size 1's optimizer, and a mesh's step replayed with it on the host;
//! - [`derived`] — what a judge derives (updates, a resumed state's view), compared in memory;
//! - [`vacuity`] — a level passes only against a reference that computes and trains;
//! - [`conformance`] — the suite every engine must pass;
//! - [`heap`] — the process heap's live and peak bytes, counted where the binary asks.

pub mod artifact;
pub mod bound;
pub mod cause;
pub mod check;
pub mod checkpoint;
pub mod compare_line;
pub mod conformance;
pub mod coupling;
pub mod derived;
pub mod engine;
pub mod finding;
pub mod gate;
pub mod gate_site;
pub mod heap;
pub mod judge;
pub mod locate;
pub mod mutation;
pub mod optimizer;
pub mod outcome;
pub mod replay;
pub mod repro;
pub mod resumed;
pub mod routing;
pub mod seal;
pub mod sharded;
pub mod stages;
pub mod tensor;
pub mod update;
pub mod vacuity;

pub use artifact::{files, ArtifactError, Manifest};
pub use check::{check, checkpoint_site, localize, CheckError, Checked, ReferenceTrace};
pub use engine::{Description, Engine, EngineError, Length, RunRequest};
pub use finding::Finding;
pub use gate::Gate;
pub use judge::{Judge, JudgeError};
pub use locate::{locate, Localization, TraceError, TraceIndex};
pub use mutation::MutationOutcome;
pub use outcome::{Comparison, Losses, Outcome};
pub use repro::Repro;
pub use seal::{seal, sealed, verify, verify_file, SealError};
pub use stages::{check_until_caught, check_until_caught_sharing, FirstStages};
pub use tensor::{HostTensor, Shards};
