//! `[run]`'s keys, one entry each: the one list of them. A key's entry says how a job's
//! settings write it back into a spec (the repro spec a shrink leaves is serialized from these
//! entries, not written by hand) and what `{{key}}` expands to in a command engine's templates.
//! The schema's `Run` table and the decoder are held to this list by tests (`schema/tests.rs`,
//! specs/tests/run_keys.rs), so adding a key is one entry here plus its meaning: its field on
//! [`Training`], its decoding and validation in `mod.rs`, its documentation in the schema.

use crate::decode::Keyword;
use crate::dtype::DType;
use crate::schedule::{LrDecay, LrSchedule};

use super::{Dropout, Packing, Training};

/// What a key's entry reads: the job's training settings and its dtype.
#[derive(Clone, Copy, Debug)]
pub struct Job<'a> {
    pub training: &'a Training,
    pub dtype: DType,
}

/// One `[run]` key.
pub struct Key {
    pub name: &'static str,
    /// The key's value in a spec that reproduces the job; `None` where the spec leaves it out
    /// (the job's value is the default, or the key is no setting of a job: the run's name, its
    /// output directory, its default device — a repro's model names its own device).
    pub spec: fn(Job<'_>) -> Option<toml::Value>,
    /// What `{{name}}` expands to in a command engine's templates: the value the job trains
    /// with, a no-op value where the run sets none (no clipping is 0, no recompute "none"), as
    /// the built-in engine reads an unset key. `None`: no template value.
    pub template: Option<fn(Job<'_>) -> String>,
}

fn int(v: impl Into<i64>) -> Option<toml::Value> {
    Some(toml::Value::Integer(v.into()))
}

fn float(v: f64) -> Option<toml::Value> {
    Some(toml::Value::Float(v))
}

fn word(v: &str) -> Option<toml::Value> {
    Some(toml::Value::String(v.to_owned()))
}

fn dropout(j: Job<'_>) -> Dropout {
    j.training.dropout.unwrap_or(Dropout {
        attention: 0.0,
        hidden: 0.0,
    })
}

fn packing(j: Job<'_>) -> Packing {
    j.training.packing.unwrap_or(Packing {
        documents: false,
        prompts: false,
        pad_to: None,
    })
}

/// The schedule where the run has one; else no warmup, constant, floor 0 (`lr` every step).
fn schedule(j: Job<'_>) -> LrSchedule {
    j.training.schedule.unwrap_or(LrSchedule {
        warmup_steps: 0,
        decay: LrDecay::Constant,
        min_lr: 0.0,
    })
}

/// Every `[run]` key, in the order a repro spec writes them.
pub const KEYS: &[Key] = &[
    Key {
        name: "name",
        spec: |_| None,
        template: None,
    },
    Key {
        name: "seed",
        spec: |j| int(i64::try_from(j.training.seed).unwrap_or(i64::MAX)),
        template: Some(|j| j.training.seed.to_string()),
    },
    Key {
        name: "dtype",
        spec: |j| word(&j.dtype.to_string()),
        template: Some(|j| j.dtype.to_string()),
    },
    Key {
        name: "steps",
        spec: |j| int(j.training.steps),
        template: Some(|j| j.training.steps.to_string()),
    },
    Key {
        name: "oracle_steps",
        spec: |j| int(j.training.oracle_steps),
        template: Some(|j| j.training.oracle_steps.to_string()),
    },
    Key {
        name: "batch",
        spec: |j| int(j.training.batch),
        template: Some(|j| j.training.batch.to_string()),
    },
    Key {
        name: "optimizer",
        spec: |j| word(j.training.optimizer.name()),
        template: Some(|j| j.training.optimizer.name().to_owned()),
    },
    Key {
        name: "lr",
        spec: |j| float(j.training.lr),
        template: Some(|j| j.training.lr.to_string()),
    },
    // The largest global gradient norm a step keeps; 0 when the run does not clip (Megatron's
    // `--clip-grad 0`).
    Key {
        name: "clip_grad_norm",
        spec: |j| j.training.clip_grad_norm.and_then(float),
        template: Some(|j| j.training.clip_grad_norm.unwrap_or(0.0).to_string()),
    },
    // The built-in engine's meaning when unset: AdamW's 0.01 on every parameter.
    Key {
        name: "weight_decay",
        spec: |j| j.training.weight_decay.and_then(float),
        template: Some(|j| j.training.weight_decay.unwrap_or(0.01).to_string()),
    },
    // torch's `label_smoothing`.
    Key {
        name: "label_smoothing",
        spec: |j| j.training.label_smoothing.and_then(float),
        template: Some(|j| j.training.label_smoothing.unwrap_or(0.0).to_string()),
    },
    Key {
        name: "z_loss",
        spec: |j| j.training.z_loss.and_then(float),
        template: Some(|j| j.training.z_loss.unwrap_or(0.0).to_string()),
    },
    // Megatron's `--attention-dropout` and `--hidden-dropout`.
    Key {
        name: "attention_dropout",
        spec: |j| j.training.dropout.and_then(|d| float(d.attention)),
        template: Some(|j| dropout(j).attention.to_string()),
    },
    Key {
        name: "hidden_dropout",
        spec: |j| j.training.dropout.and_then(|d| float(d.hidden)),
        template: Some(|j| dropout(j).hidden.to_string()),
    },
    // Megatron's `--recompute-granularity`; "none" when the run recomputes nothing.
    Key {
        name: "recompute",
        spec: |j| j.training.recompute.and_then(|r| word(r.name())),
        template: Some(|j| j.training.recompute.map_or("none", |r| r.name()).to_owned()),
    },
    // Packed documents and prompt loss masks: "true" or "false".
    Key {
        name: "packed_sequences",
        spec: |j| {
            j.training
                .packing
                .map(|p| toml::Value::Boolean(p.documents))
        },
        template: Some(|j| packing(j).documents.to_string()),
    },
    Key {
        name: "mask_prompts",
        spec: |j| j.training.packing.map(|p| toml::Value::Boolean(p.prompts)),
        template: Some(|j| packing(j).prompts.to_string()),
    },
    // The documents' padding multiple; 1 when they are not padded.
    Key {
        name: "pad_documents_to",
        spec: |j| j.training.packing.and_then(|p| p.pad_to).and_then(int),
        template: Some(|j| packing(j).pad_to.unwrap_or(1).to_string()),
    },
    Key {
        name: "warmup_steps",
        spec: |j| j.training.schedule.and_then(|s| int(s.warmup_steps)),
        template: Some(|j| schedule(j).warmup_steps.to_string()),
    },
    Key {
        name: "lr_decay",
        spec: |j| j.training.schedule.and_then(|s| word(s.decay.name())),
        template: Some(|j| schedule(j).decay.name().to_owned()),
    },
    Key {
        name: "min_lr",
        spec: |j| j.training.schedule.and_then(|s| float(s.min_lr)),
        template: Some(|j| schedule(j).min_lr.to_string()),
    },
    Key {
        name: "output",
        spec: |_| None,
        template: None,
    },
    Key {
        name: "device",
        spec: |_| None,
        template: None,
    },
];

/// The keys' names.
pub fn names() -> impl Iterator<Item = &'static str> {
    KEYS.iter().map(|k| k.name)
}

/// `[run]`'s table for a spec named `name` that reproduces `job`: every key the job sets.
pub fn table(name: &str, job: Job<'_>) -> toml::Table {
    let mut t = toml::Table::new();
    t.insert("name".to_owned(), toml::Value::String(name.to_owned()));
    for k in KEYS {
        if let Some(v) = (k.spec)(job) {
            t.insert(k.name.to_owned(), v);
        }
    }
    t
}

/// `(key, value)` for every key a command template sees.
pub fn template_values(job: Job<'_>) -> impl Iterator<Item = (&'static str, String)> + '_ {
    KEYS.iter()
        .filter_map(move |k| k.template.map(|f| (k.name, f(job))))
}
