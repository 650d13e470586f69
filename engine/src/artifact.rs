//! The artifact contract: what an engine run leaves in its directory, under which names, and
//! the manifest that says what it wrote. Every level is judged from these files alone, so a
//! verdict can be re-derived later with `meshparity compare` and any engine that writes them
//! (the built-in burn model, a user's own training program) is judged the same way.
//!
//! Tensors are canonical: world-size-1 names and full shapes, whatever mesh computed them. An
//! engine that trains on a mesh merges its ranks' shards before writing (and says in the
//! manifest when replicas that must agree did not, which no file could show).

use std::path::Path;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// Artifact file names, shared by the reference and the candidates.
/// The words an unmerged artifact's reason holds when a padded vocabulary's padding rows are not
/// zero (they never enter the loss, so a correct run never moves them): the judge names the
/// failed gate `padding_trained` for it, `replicas_differ` otherwise.
pub const PADDING_TRAINED: &str = "padding past the vocabulary";

pub mod files {
    /// The manifest of a run directory.
    pub const MANIFEST: &str = "manifest.json";
    /// Initial weights (the reference run only).
    pub const SEED: &str = "seed.safetensors";
    /// The seed checkpoint saved by the mesh's sharded saver and loaded back (roundtrip).
    pub const CHECKPOINT: &str = "checkpoint.safetensors";
    /// First-step logits (`logits`) and loss (`loss`).
    pub const FORWARD: &str = "forward.safetensors";
    /// One JSON object per step: `{"step": 1, "loss": ...}`.
    pub const CURVE: &str = "curve.jsonl";
    /// The moe family's first-step routing ([`crate::routing`]; judged by
    /// `meshparity_judge::routing`).
    pub const ROUTING: &str = "routing.safetensors";
    /// The moe family's top-k experts of every step (`step{S}.layers.{L}`, [B·S, k] i64),
    /// written by the burn engine's reference for its mesh runs to replay.
    pub const ROUTING_REPLAY: &str = "routing-replay.safetensors";
    /// First-step gradients.
    pub const GRADS: &str = "grads.safetensors";
    /// Weights after the oracle level's steps.
    pub const WEIGHTS: &str = "weights.safetensors";
    /// Weights after k steps minus the seed weights, in f64 (what the oracle level compares);
    /// the judge derives it from `WEIGHTS` and the reference's `SEED`.
    pub const UPDATES: &str = "updates.safetensors";
    /// The reference's updates, beside the candidate's in a judge's directory.
    pub const REFERENCE_UPDATES: &str = "reference-updates.safetensors";
    /// A mesh run's last oracle step as its optimizer took it — the gradients, and the state
    /// before and after — merged to world-size-1 names, which the oracle level replays with
    /// world size 1's optimizer (`meshparity_judge::optimizer_step`; layout:
    /// [`crate::optimizer::step`]).
    pub const OPTIMIZER_STEP: &str = "optimizer-step.safetensors";
    /// Per-site traces for localization ([`crate::trace`]; compared by
    /// `meshparity_judge::locate`), and their order.
    pub const TRACE: &str = "trace.safetensors";
    pub const TRACE_INDEX: &str = "trace.json";
    /// Per-rank shard files of the roundtrip level.
    pub const SHARDS: &str = "shards";
    /// A `[[resume]]` pair's run: the state its first mesh saved, merged to world-size-1
    /// names (weights, optimizer moments and counters, data and random positions); beside it
    /// `CHECKPOINT` is the state the second mesh loaded, merged back, and the roundtrip level
    /// holds them bit-equal.
    pub const RESUME_SAVED: &str = "resume-saved.safetensors";
    /// The sharded checkpoint the first mesh saved ([`crate::sharded`]).
    pub const RESUME_CHECKPOINT: &str = "resume-checkpoint";
    /// The rows each rank trained on, per step, as digests ([`crate::inputs`]); held to the
    /// reference's by the forward (first step), curve and oracle levels where the run wrote
    /// them.
    pub const INPUTS: &str = "inputs.jsonl";

    /// The whole training state after `step` updates, merged to world-size-1 names as
    /// `RESUME_SAVED` holds it: a reference keeps one for each step its training's
    /// `states_at` names, a pair's run one after `oracle_steps` (its final state).
    pub fn state_at(step: u32) -> String {
        format!("state-at-step{step}.safetensors")
    }
}

/// What one engine run wrote and saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The engine and the device it computed on, e.g. `burn-flex` / `cpu`.
    pub engine: String,
    pub device: String,
    /// Ranks of the run (1 for a reference).
    pub world_size: u64,
    /// The dtype the run computed in (its artifacts may be upcast: f32 master weights, f64
    /// updates): what `meshparity compare` picks its limits by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<meshparity_specs::DType>,
    /// Training steps run.
    pub steps: usize,
    /// Artifact files written, by name (see [`files`]).
    pub artifacts: Vec<String>,
    /// Collective calls the run made (0 where the engine cannot count them).
    #[serde(default)]
    pub collectives: usize,
    /// The most a training step's heap grew over what it started with (activations held for
    /// backward, gradients, temporaries), where the engine measures it (the burn engine, in a
    /// worker: [`crate::heap`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_bytes: Option<u64>,
    /// Sites an injected mutation altered, as `site: what happened`.
    #[serde(default)]
    pub altered: Vec<String>,
    /// Receives with no matching send and the like.
    #[serde(default)]
    pub anomalies: Vec<String>,
    /// Artifacts whose rank shards could not be merged (replicas that must agree did not, or
    /// a padded vocabulary's padding that must stay zero did not: [`PADDING_TRAINED`]), with
    /// why: such an artifact is absent and judged as failed, not as missing.
    #[serde(default)]
    pub unmerged: IndexMap<String, String>,
    /// Metrics the run's curve logged that are neither gated nor performance figures, left
    /// out of its contract curve (a command engine's program may log anything): the curve level
    /// says so in its notes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ungated: Vec<String>,
    pub seconds: f64,
    /// BLAKE3 of every file in the directory, by relative path: written by [`crate::seal`]
    /// once the run is complete, checked before the directory is reused or judged.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub blake3: IndexMap<String, String>,
}

/// Why an artifact directory cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a meshparity manifest: {source}")]
    Manifest {
        path: String,
        source: serde_json::Error,
    },
    #[error(
        "{dir} has no `{file}`, which the {level} level needs (the engine run did not write it; \
         its manifest lists: {listed})"
    )]
    Missing {
        dir: String,
        file: String,
        level: String,
        listed: String,
    },
}

impl Manifest {
    pub fn has(&self, file: &str) -> bool {
        self.artifacts.iter().any(|a| a == file) || self.unmerged.contains_key(file)
    }

    pub fn read(dir: &Path) -> Result<Self, ArtifactError> {
        let path = dir.join(files::MANIFEST);
        let bytes =
            meshparity_files::read(&path, meshparity_files::Limit::JSON).map_err(|source| {
                ArtifactError::Io {
                    path: path.display().to_string(),
                    source,
                }
            })?;
        serde_json::from_slice(&bytes).map_err(|source| ArtifactError::Manifest {
            path: path.display().to_string(),
            source,
        })
    }

    pub fn write(&self, dir: &Path) -> Result<(), ArtifactError> {
        let path = dir.join(files::MANIFEST);
        let bytes = serde_json::to_vec_pretty(self).expect("manifests serialize");
        std::fs::write(&path, bytes).map_err(|source| ArtifactError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// The file `file` of the run in `dir`, or why the level cannot be judged.
    pub fn require(&self, dir: &Path, file: &str, level: &str) -> Result<(), ArtifactError> {
        if self.artifacts.iter().any(|a| a == file) && dir.join(file).exists() {
            return Ok(());
        }
        Err(ArtifactError::Missing {
            dir: dir.display().to_string(),
            file: file.to_owned(),
            level: level.to_owned(),
            listed: if self.artifacts.is_empty() {
                "nothing".into()
            } else {
                self.artifacts.join(", ")
            },
        })
    }
}

/// Per-step losses as JSON Lines, steps counted from 1, with further per-step metrics (e.g. a
/// MoE model's `lb_loss`) beside `loss`; the curve level gates every metric both sides write.
pub fn write_curve(path: &Path, losses: &[f64], extra: &[(&str, &[f64])]) -> std::io::Result<()> {
    let curve: String = losses
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let more: String = extra
                .iter()
                .filter_map(|(name, v)| v.get(i).map(|x| format!(", \"{name}\": {}", json_f64(*x))))
                .collect();
            format!(
                "{{\"step\": {}, \"loss\": {}{more}}}\n",
                i + 1,
                json_f64(*l)
            )
        })
        .collect();
    std::fs::write(path, curve)
}

/// Full precision, and NaN/inf as Python writes them, so a diverged run reads back as such.
fn json_f64(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{x:?}")
    }
}
