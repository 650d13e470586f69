//! The trace files an engine writes beside its run: `trace.safetensors` (one tensor per traced
//! value, canonicalized to world size 1) and `trace.json` (the values in computation order and
//! the reference value each is compared with).

use std::path::Path;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::artifact::files;
use crate::checkpoint;
use crate::tensor::HostTensor;

/// Steps traced: a bug in step 0 shows there; one in the update shows in step 1's forward.
/// The trace level's runs train at least these.
pub const STEPS: usize = 2;

/// Why a trace could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a meshparity trace index: {source}")]
    Index {
        path: String,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Input(#[from] meshparity_compare::InputError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TraceError + '_ {
    move |source| TraceError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// One traced value, in computation order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TraceEntry {
    /// `s{step}.{site}`, with `@{copy}` for each rank's copy of a replicated value.
    pub key: String,
    /// The reference value it is compared with.
    pub like: String,
    /// Row blocks (DP replica × microbatch, in order) stacked along the first dimension; 0 for
    /// step-wide values.
    #[serde(default)]
    pub blocks: usize,
    /// The mesh axes a copy's index runs over, major first (`["dp", "tp"]`: copy 3 is dp rank
    /// 1's tp rank 1), where the engine says so; empty: the site's usual copies
    /// (`meshparity_judge::cause`'s order for the built-in engine). A command engine's program names
    /// them in its site list (`grad.norm.weight@tp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub over: Vec<String>,
}

/// `trace.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TraceIndex {
    /// Microbatches per DP replica (to name a row block's replica and microbatch).
    pub microbatches: usize,
    pub entries: Vec<TraceEntry>,
    /// Traced by a user's program (a command engine), not the built-in engine: every value is
    /// held to the site limit, the gradient norm included — the built-in gate on the norm is
    /// sized for the built-in engine's round-off, while torchtitan's correct f32 norm on
    /// tp2·sp is 5.3e-5 off world size 1's (its gradients within 1e-4), and a correct
    /// program's norm then read as the first divergence of every failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub program: bool,
    /// Sites the run's program left out of its trace on purpose, each with why
    /// (`layers.0.moe.experts: …`): a localization that finds nothing says which sites it
    /// could not look at, and why, instead of only comparing fewer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
}

/// A site a program did not trace, and its reason (a `!NAME: why` line of its site list).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LeftOut {
    pub site: String,
    pub why: String,
}

/// Write a run's trace into `dir`.
pub fn write_trace(
    dir: &Path,
    index: &TraceIndex,
    tensors: &IndexMap<String, HostTensor>,
) -> Result<(), TraceError> {
    let path = dir.join(files::TRACE);
    checkpoint::save(&path, tensors).map_err(io(&path))?;
    let path = dir.join(files::TRACE_INDEX);
    let json = serde_json::to_vec_pretty(index).expect("trace index serializes");
    meshparity_files::write_replace(&path, &json).map_err(io(&path))?;
    Ok(())
}

pub fn read_trace(dir: &Path) -> Result<(TraceIndex, IndexMap<String, HostTensor>), TraceError> {
    let path = dir.join(files::TRACE_INDEX);
    let text = meshparity_files::read_to_string(&path, meshparity_files::Limit::JSON)
        .map_err(io(&path))?;
    let index = serde_json::from_str(&text).map_err(|source| TraceError::Index {
        path: path.display().to_string(),
        source,
    })?;
    let tensors = checkpoint::load(&dir.join(files::TRACE))?;
    Ok((index, tensors))
}
