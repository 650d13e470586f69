//! `[run]`'s keys, one entry each: the one list of them. A key's entry says how a job's
//! settings write it back into a spec (the repro spec a shrink leaves is serialized from these
//! entries, not written by hand) and what `{{key}}` expands to in a command engine's templates.
//! The schema's `Run` table is generated from these entries (each key's documentation and
//! value type are here), and the decoder is held to them by a test (specs/tests/run_keys.rs), so
//! adding a key is one entry here plus its meaning: its field on [`Training`], its decoding and
//! validation in `mod.rs`.

use schemars::{JsonSchema, Schema, SchemaGenerator};

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
    /// What the key means, as the spec's JSON Schema (and so an editor) documents it.
    pub doc: &'static str,
    /// The JSON Schema of its value: its type and range.
    pub schema: fn(&mut SchemaGenerator) -> Schema,
    /// The key's value in a spec that reproduces the job; `None` where the spec leaves it out
    /// (the job's value is the default, or the key is no setting of a job: the run's name, its
    /// output directory, its default device — a repro's model names its own device).
    pub spec: fn(Job<'_>) -> Option<toml::Value>,
    /// What `{{name}}` expands to in a command engine's templates: the value the job trains
    /// with, a no-op value where the run sets none (no clipping is 0, no recompute "none"), as
    /// the built-in engine reads an unset key. `None`: no template value.
    pub template: Option<fn(Job<'_>) -> String>,
}

/// A value of type `T`, as an optional key's (TOML has no null: the schema drops it).
fn of<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<Option<T>>()
}

/// `schema` with its values held to [`min`, `max`].
fn within(mut schema: Schema, min: i64, max: Option<i64>) -> Schema {
    schema.insert("minimum".into(), min.into());
    if let Some(max) = max {
        schema.insert("maximum".into(), max.into());
    }
    schema
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
        doc: "Run name (default: the spec's file name).",
        schema: of::<String>,
        spec: |_| None,
        template: None,
    },
    Key {
        name: "seed",
        doc: "Seed for initialization and data (default 1234).",
        schema: of::<u64>,
        spec: |j| int(i64::try_from(j.training.seed).unwrap_or(i64::MAX)),
        template: Some(|j| j.training.seed.to_string()),
    },
    Key {
        name: "dtype",
        doc: "Default dtype of models that set none (default f32).",
        schema: of::<DType>,
        spec: |j| word(&j.dtype.to_string()),
        template: Some(|j| j.dtype.to_string()),
    },
    Key {
        name: "steps",
        doc: "Training steps for the curve level (default 4).",
        schema: |g| within(of::<u32>(g), 1, None),
        spec: |j| int(j.training.steps),
        template: Some(|j| j.training.steps.to_string()),
    },
    Key {
        name: "oracle_steps",
        doc: "Steps after which the oracle level compares gradients and weights (default 2).",
        schema: |g| within(of::<u32>(g), 1, None),
        spec: |j| int(j.training.oracle_steps),
        template: Some(|j| j.training.oracle_steps.to_string()),
    },
    Key {
        name: "batch",
        doc: "Global batch in sequences; must divide by dp × microbatches of every mesh (default 8).",
        schema: |g| within(of::<u32>(g), 1, None),
        spec: |j| int(j.training.batch),
        template: Some(|j| j.training.batch.to_string()),
    },
    Key {
        name: "optimizer",
        doc: "Optimizer (default adamw).",
        schema: of::<super::Optimizer>,
        spec: |j| word(j.training.optimizer.name()),
        template: Some(|j| j.training.optimizer.name().to_owned()),
    },
    Key {
        name: "lr",
        doc: "Learning rate (default 1e-3).",
        schema: of::<f64>,
        spec: |j| float(j.training.lr),
        template: Some(|j| j.training.lr.to_string()),
    },
    // The largest global gradient norm a step keeps; 0 when the run does not clip (Megatron's
    // `--clip-grad 0`).
    Key {
        name: "clip_grad_norm",
        doc: "Clip gradients to this global L2 norm (over every parameter, as one device sees them);\n\
             default: no clipping. The norm before clipping is compared either way (`grad_norm`).",
        schema: |g| within(of::<f64>(g), 0, None),
        spec: |j| j.training.clip_grad_norm.and_then(float),
        template: Some(|j| j.training.clip_grad_norm.unwrap_or(0.0).to_string()),
    },
    // The built-in engine's meaning when unset: AdamW's 0.01 on every parameter.
    Key {
        name: "weight_decay",
        doc: "Decoupled weight decay of the weight matrices (norms and biases exempt); default: AdamW's\n\
             0.01 on every parameter.",
        schema: |g| within(of::<f64>(g), 0, None),
        spec: |j| j.training.weight_decay.and_then(float),
        template: Some(|j| j.training.weight_decay.unwrap_or(0.01).to_string()),
    },
    // torch's `label_smoothing`.
    Key {
        name: "label_smoothing",
        doc: "Label smoothing ε of the cross-entropy, in [0, 1): 1 − ε on each token's label and ε\n\
             spread uniformly over the whole vocabulary, as torch's `label_smoothing`; default 0.",
        schema: |g| within(of::<f64>(g), 0, Some(1)),
        spec: |j| j.training.label_smoothing.and_then(float),
        template: Some(|j| j.training.label_smoothing.unwrap_or(0.0).to_string()),
    },
    Key {
        name: "z_loss",
        doc: "The z-loss weight w, in [0, 1): each counted token adds w·(log Σ exp z)² to the loss,\n\
             normalized like the cross-entropy (PaLM's, 1e-4 there); default 0.",
        schema: |g| within(of::<f64>(g), 0, Some(1)),
        spec: |j| j.training.z_loss.and_then(float),
        template: Some(|j| j.training.z_loss.unwrap_or(0.0).to_string()),
    },
    // Megatron's `--attention-dropout` and `--hidden-dropout`.
    Key {
        name: "attention_dropout",
        doc: "Dropout probability of the attention probabilities, in [0, 1) (Megatron's\n\
             `--attention-dropout`); default 0. Masks are a function of the seed, the step and the\n\
             global position, so a correct mesh drops what world size 1 drops.",
        schema: |g| within(of::<f64>(g), 0, Some(1)),
        spec: |j| j.training.dropout.and_then(|d| float(d.attention)),
        template: Some(|j| dropout(j).attention.to_string()),
    },
    Key {
        name: "hidden_dropout",
        doc: "Dropout probability of each residual branch's output, in [0, 1) (Megatron's\n\
             `--hidden-dropout`); default 0.",
        schema: |g| within(of::<f64>(g), 0, Some(1)),
        spec: |j| j.training.dropout.and_then(|d| float(d.hidden)),
        template: Some(|j| dropout(j).hidden.to_string()),
    },
    // Megatron's `--recompute-granularity`; "none" when the run recomputes nothing.
    Key {
        name: "recompute",
        doc: "Activation recompute (Megatron's `--recompute-granularity`): \"full\" re-runs each\n\
             layer's attention and MLP blocks in backward from their saved inputs, \"selective\" the\n\
             attention between its TP collectives (projections, scores, softmax, dropout, values);\n\
             default: none. Dropout's masks are the forward's either way.",
        schema: of::<super::Recompute>,
        spec: |j| j.training.recompute.and_then(|r| word(r.name())),
        template: Some(|j| j.training.recompute.map_or("none", |r| r.name()).to_owned()),
    },
    // Packed documents and prompt loss masks: "true" or "false".
    Key {
        name: "packed_sequences",
        doc: "Several documents per row (default false): attention stays inside each document,\n\
             positions restart at each document's first token, and no label crosses a boundary\n\
             (Megatron's `--reset-attention-mask --reset-position-ids`).",
        schema: of::<bool>,
        spec: |j| {
            j.training
                .packing
                .map(|p| toml::Value::Boolean(p.documents))
        },
        template: Some(|j| packing(j).documents.to_string()),
    },
    Key {
        name: "mask_prompts",
        doc: "Each document opens with a prompt whose labels are ignored (`-100`), as supervised\n\
             fine-tuning masks them (default false).",
        schema: of::<bool>,
        spec: |j| j.training.packing.map(|p| toml::Value::Boolean(p.prompts)),
        template: Some(|j| packing(j).prompts.to_string()),
    },
    // The documents' padding multiple; 1 when they are not padded.
    Key {
        name: "pad_documents_to",
        doc: "Pad each packed document to a multiple of this many tokens (needs `packed_sequences`),\n\
             as TransformerEngine's THD layout does for context parallelism: CP then cuts every\n\
             document into 2·cp chunks, rank c holding chunks c and 2·cp−1−c of each. A multiple of\n\
             2·cp for every mesh, dividing every model's seq_len.",
        schema: |g| within(of::<u32>(g), 2, None),
        spec: |j| j.training.packing.and_then(|p| p.pad_to).and_then(int),
        template: Some(|j| packing(j).pad_to.unwrap_or(1).to_string()),
    },
    Key {
        name: "warmup_steps",
        doc: "Steps of linear learning-rate warmup (fewer than `steps`; default 0).",
        schema: of::<u32>,
        spec: |j| j.training.schedule.and_then(|s| int(s.warmup_steps)),
        template: Some(|j| schedule(j).warmup_steps.to_string()),
    },
    Key {
        name: "lr_decay",
        doc: "Learning-rate decay after warmup, to `min_lr` at the last step: constant (default),\n\
             linear or cosine.",
        schema: of::<LrDecay>,
        spec: |j| j.training.schedule.and_then(|s| word(s.decay.name())),
        template: Some(|j| schedule(j).decay.name().to_owned()),
    },
    Key {
        name: "min_lr",
        doc: "The learning rate the decay ends at (default 0; at most `lr`).",
        schema: |g| within(of::<f64>(g), 0, None),
        spec: |j| j.training.schedule.and_then(|s| float(s.min_lr)),
        template: Some(|j| schedule(j).min_lr.to_string()),
    },
    Key {
        name: "output",
        doc: "Output directory for runs (default meshparity-out).",
        schema: of::<String>,
        spec: |_| None,
        template: None,
    },
    Key {
        name: "device",
        doc: "Device of every model that sets none: cpu (default), gpu or gpu:N.",
        schema: of::<crate::device::Device>,
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
