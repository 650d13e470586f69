//! One unit of work in the plan.

use std::fmt;

use meshparity_specs::{DType, Device, Level, Limits, MeshConfig, ModelConfig, Training};
use serde::{Deserialize, Serialize};

/// Stable id of a job: the first 64 bits of a BLAKE3 hash of the job's identity (what it
/// computes, not where in the file it was written), as 16 hex digits. Reordering a spec keeps
/// ids, so hash partitions and caches stay put.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u64);

impl JobId {
    pub fn of(identity: &impl Serialize) -> Self {
        let bytes = serde_json::to_vec(identity).expect("job identities serialize");
        let hash = blake3::hash(&bytes);
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash.as_bytes()[..8]);
        JobId(u64::from_be_bytes(first))
    }

    pub fn parse(s: &str) -> Option<Self> {
        (s.len() == 16)
            .then(|| u64::from_str_radix(s, 16).ok().map(JobId))
            .flatten()
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl Serialize for JobId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JobId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        JobId::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("`{s}` is not a job id (16 hex digits)"))
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum JobKind {
    /// World-size-1 run producing the oracle artifacts of one model configuration and dtype.
    Reference,
    /// One engine run of a model on a mesh, writing the artifacts every level of the cell is
    /// judged from: each mesh trains once, however many levels judge it.
    Train { levels: Vec<Level> },
    /// One level of checks of a model on a mesh.
    Check { level: Level },
    /// A correct mesh with one bug injected; passes only if one of `levels` fails.
    Mutation {
        mutation: String,
        levels: Vec<Level>,
    },
}

impl JobKind {
    /// Rough cost, in judge jobs, for the start order: a training (reference, mesh or
    /// mutation) runs the model for several steps; a judge reads files and compares them.
    pub fn cost(&self) -> u64 {
        match self {
            JobKind::Check { .. } => 1,
            _ => 8,
        }
    }

    /// The word filters match with `level=`: the level, `reference`, `train` or `mutation`.
    pub fn level_name(&self) -> &'static str {
        match self {
            JobKind::Reference => "reference",
            JobKind::Train { .. } => "train",
            JobKind::Check { level } => level.as_str(),
            JobKind::Mutation { .. } => "mutation",
        }
    }
}

/// A job as the runner and reports see it (and as a worker reads it from its job file).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    /// `model@dtype/reference`, `model@dtype/mesh/train`, `model@dtype/mesh/level`,
    /// `model@dtype/mesh/mutation[name]`.
    pub name: String,
    #[serde(flatten)]
    pub kind: JobKind,
    /// Model names this job serves; a reference job is shared by every model with its config.
    pub models: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mesh: Option<String>,
    /// e.g. `tp2-pp1-dp2-ep1-cp1-f32`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mesh_tag: Option<String>,
    pub dtype: DType,
    /// Ranks the job simulates; the scheduler's weight for it.
    pub world_size: u64,
    pub model_config: ModelConfig,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mesh_config: Option<MeshConfig>,
    /// Tolerance table and the limits in force (check jobs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    pub training: Training,
    /// Where it computes; its reference computes on the same device.
    pub device: Device,
    /// The `[variants.NAME]` this job runs (or, for a level, judges against the baseline).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Which run of its variant (2: the baseline's second run, the noise envelope).
    #[serde(skip_serializing_if = "is_one", default = "one")]
    pub repeat: u32,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn one() -> u32 {
    1
}

impl Job {
    pub fn model(&self) -> &str {
        &self.models[0]
    }

    pub fn level(&self) -> Option<Level> {
        match self.kind {
            JobKind::Check { level } => Some(level),
            _ => None,
        }
    }

    pub fn mutation(&self) -> Option<&str> {
        match &self.kind {
            JobKind::Mutation { mutation, .. } => Some(mutation),
            _ => None,
        }
    }
}
