//! JSON Schema of the spec format, for editors (taplo / Even Better TOML, Tombi).
//!
//! The decoder reads tables by hand (for spans and all-errors-at-once), so these structs exist
//! only to describe the format; a test keeps their keys equal to the keys the decoder accepts.

#![allow(dead_code, clippy::large_enum_variant)]

mod engine;
mod tolerance;

use indexmap::IndexMap;
use schemars::JsonSchema;

use self::engine::{Engine, Variant};
use self::tolerance::Tolerances;
use crate::device::Device;
use crate::dtype::DType;
use crate::family::Family;
use crate::level::Level;
use crate::mesh::MeshSchema as Mesh;

/// A meshparity spec: models × meshes × check levels × tolerance tables.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields, title = "meshparity spec")]
struct SpecFile {
    /// Spec files (relative to this one) whose models, meshes and tolerance tables are shared.
    include: Option<Vec<String>>,
    /// Settings shared by every job.
    run: Option<Run>,
    /// Model configurations by name.
    models: Option<IndexMap<String, Model>>,
    /// Parallel layouts by name.
    meshes: Option<IndexMap<String, Mesh>>,
    /// Your own training programs as engines, by name; models name one with `engine`.
    engines: Option<IndexMap<String, Engine>>,
    /// Versions of your program judged against each other on every mesh; the first is the
    /// baseline.
    variants: Option<IndexMap<String, Variant>>,
    /// Tolerance tables by name; `builtin` always exists.
    tolerances: Option<IndexMap<String, Tolerances>>,
    /// Which models × meshes × levels × dtypes to check; absent: everything.
    matrix: Option<Vec<MatrixEntry>>,
    /// Stop a mesh's training, save, resume on another layout: each pair is checked against
    /// the uninterrupted run.
    resume: Option<Vec<Resume>>,
    /// Injected bugs that the checks must catch.
    mutations: Option<Mutations>,
    /// Where jobs run: this machine (default) or a Slurm cluster.
    executor: Option<Executor>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Executor {
    /// `local` (default): processes on this machine; `slurm`: one batch job per job.
    kind: Option<ExecutorKind>,
    /// Slurm partition (`sbatch --partition`).
    partition: Option<String>,
    /// Slurm account (`sbatch --account`).
    account: Option<String>,
    /// Slurm quality of service (`sbatch --qos`).
    qos: Option<String>,
    /// Further `sbatch` arguments, as written, after meshparity's own.
    sbatch_args: Option<Vec<String>>,
    /// Variables set for every job, beside the submitting environment.
    env: Option<IndexMap<String, String>>,
    /// A program that launches its own ranks: `one` task holding all their CPUs/GPUs (for
    /// torchrun; default) or one task `per-rank` (for srun inside the job).
    tasks: Option<Tasks>,
    /// Jobs submitted and not finished, at most (default 500).
    #[schemars(range(min = 1))]
    max_pending: Option<u32>,
    /// Seconds between two polls of the cluster's job states (default: half a second).
    #[schemars(range(min = 1))]
    poll_seconds: Option<u32>,
}

#[derive(JsonSchema)]
#[schemars(rename_all = "kebab-case")]
enum Tasks {
    One,
    PerRank,
}

#[derive(JsonSchema)]
#[schemars(rename_all = "lowercase")]
enum ExecutorKind {
    Local,
    Slurm,
}

/// `[run]`: every key of [`crate::run::keys::KEYS`], with the documentation and value type its
/// entry there gives (the one list of them), closed to others.
struct Run;

impl JsonSchema for Run {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Run".into()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut properties = serde_json::Map::new();
        for key in crate::run::keys::KEYS {
            let mut schema = (key.schema)(g);
            schema.insert("description".into(), key.doc.into());
            properties.insert(key.name.into(), schema.into());
        }
        schemars::json_schema!({
            "type": "object",
            "additionalProperties": false,
            "properties": properties,
        })
    }
}

/// A model. With `engine`, any other key (string, number, boolean) is passed to the engine's
/// templates, so unknown keys are allowed here; meshparity itself still refuses them on models
/// of the built-in engine.
#[derive(JsonSchema)]
#[schemars(extend(
    "additionalProperties" = {"type": ["string", "number", "boolean"]},
    "if" = {"not": {"required": ["engine"]}},
    "then" = {"propertyNames": {"enum": [
        "family", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "experts",
        "top_k", "routing_replay", "router", "expert_bias", "shared_expert_ffn",
        "capacity_factor", "drop_policy", "aux_loss_normalization", "tie_embeddings", "mtp_layers", "dtype",
        "device", "engine", "reference"
    ]}}
))]
struct Model {
    /// The `[engines.NAME]` that trains this model (default: the built-in burn engine).
    engine: Option<String>,
    /// The `[engines.NAME]` of its world-size-1 reference run (default: `engine` itself).
    reference: Option<String>,
    /// Built-in family (default llama).
    family: Option<Family>,
    #[schemars(range(min = 1))]
    layers: Option<u32>,
    #[schemars(range(min = 1))]
    hidden: Option<u32>,
    #[schemars(range(min = 1))]
    heads: Option<u32>,
    /// Key/value heads for grouped-query attention (default: heads).
    #[schemars(range(min = 1))]
    kv_heads: Option<u32>,
    /// MLP (and expert) intermediate size.
    #[schemars(range(min = 1))]
    ffn: Option<u32>,
    #[schemars(range(min = 1))]
    vocab: Option<u32>,
    #[schemars(range(min = 2))]
    seq_len: Option<u32>,
    /// Routed experts (moe only, default 4).
    #[schemars(range(min = 1))]
    experts: Option<u32>,
    /// Experts per token (moe only, default 2).
    #[schemars(range(min = 1))]
    top_k: Option<u32>,
    /// Mesh runs replay the reference's expert choices (moe only, default true); false shows
    /// what replay hides: round-off tie flips that send tokens to other experts.
    routing_replay: Option<bool>,
    /// Router score function (moe only, default softmax; sigmoid as in DeepSeek-V3).
    router: Option<crate::moe::RouterScore>,
    /// Score-correction bias for top-k selection, updated each step towards balanced load
    /// (moe only, default false).
    expert_bias: Option<bool>,
    /// Hidden size of a shared expert every token passes through (moe only, default none).
    #[schemars(range(min = 1))]
    shared_expert_ffn: Option<u32>,
    /// Expert capacity per sequence as a factor of the balanced share (moe only, default:
    /// dropless).
    #[schemars(range(min = 0.0))]
    capacity_factor: Option<f64>,
    /// Which routed tokens an expert over capacity drops (moe only, with capacity_factor;
    /// default probs).
    drop_policy: Option<crate::moe::DropPolicy>,
    /// What the load-balance loss averages over (moe only, default sequence): "sequence"
    /// weighs every sequence the same, "token" every real token (the per-token loss form).
    aux_loss_normalization: Option<crate::moe::AuxNormalization>,
    /// One weight for the embedding and the output head (default false): the output head is
    /// the embedding transposed; with pp > 1 the first and last stages each hold it and
    /// all-reduce its gradient (Megatron's embedding group); with TP it is vocab-parallel in
    /// both uses.
    tie_embeddings: Option<bool>,
    /// Multi-token prediction layers (default 0; the built-in engine builds 1, family llama):
    /// DeepSeek-V3's MTP — the last hidden state and the next token's embedding, normed,
    /// concatenated and projected, through one more transformer layer and the shared output
    /// head, predicting the token after next; 0.1 of its loss is added to the training loss.
    /// Its inputs and labels are shifted over the whole sequence before context parallelism
    /// shards it, never across a document boundary.
    #[schemars(range(min = 0, max = 1))]
    mtp_layers: Option<u32>,
    /// Dtype (default: [run] dtype).
    dtype: Option<DType>,
    /// Device (default: [run] device).
    device: Option<Device>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct MatrixEntry {
    /// Model names (default: all).
    models: Option<Vec<String>>,
    /// Mesh names (default: all).
    meshes: Option<Vec<String>>,
    /// Levels (default: all the model's family supports).
    levels: Option<Vec<Level>>,
    /// Dtypes (default: the model's).
    dtypes: Option<Vec<DType>>,
    /// Tolerance table (default: `default` if defined, else `builtin`).
    tolerance: Option<String>,
    /// Run the selected mutations on these cells (default true).
    mutations: Option<bool>,
    /// Cells to drop: a rule matches when every key it gives matches.
    exclude: Option<Vec<Exclude>>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Resume {
    /// Meshes that train the first `at` steps and save (`world1`: world size 1).
    from: Vec<String>,
    /// Meshes that load the checkpoint and train on (`world1`: world size 1).
    to: Vec<String>,
    /// Steps trained before the checkpoint.
    #[schemars(range(min = 1))]
    at: u32,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Exclude {
    model: Option<String>,
    mesh: Option<String>,
    level: Option<Level>,
    dtype: Option<DType>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Mutations {
    /// Mutation names from the catalog (docs/mutations.md), or "all".
    #[schemars(schema_with = "mutation_names", default)]
    select: Option<Vec<String>>,
    /// Mutation names to leave out.
    #[schemars(schema_with = "mutation_names", default)]
    exclude: Option<Vec<String>>,
}

/// A list of names from a closed set, read from the registry that defines them.
fn names_array(names: &[&str]) -> schemars::Schema {
    schemars::json_schema!({ "type": "array", "items": { "enum": names } })
}

fn mutation_names(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut names = crate::catalog::names();
    names.push("all");
    names_array(&names)
}

fn needs_names(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    names_array(crate::mutation::Needs::NAMES)
}

/// The spec's JSON Schema (draft-07), pretty-printed.
pub fn json_schema() -> String {
    let generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let schema = generator.into_root_schema_for::<SpecFile>();
    let mut value = schema.to_value();
    drop_null(&mut value);
    let mut s = serde_json::to_string_pretty(&value).expect("a schema always serializes");
    s.push('\n');
    s
}

/// TOML has no null: an absent key is how a spec says "default", so `Option<T>` fields are
/// described as plain `T` (schemars would allow `null`).
fn drop_null(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    map.insert("type".into(), only);
                }
            }
            if let Some(Value::Array(any)) = map.get_mut("anyOf") {
                any.retain(|s| s.get("type").is_none_or(|t| t != "null"));
                if any.len() == 1 {
                    let only = any.remove(0);
                    map.remove("anyOf");
                    match only {
                        // draft-07 ignores the siblings of `$ref`; keep the description beside it.
                        Value::Object(inner) if inner.contains_key("$ref") => {
                            map.insert("allOf".into(), Value::Array(vec![Value::Object(inner)]));
                        }
                        Value::Object(inner) => {
                            for (k, val) in inner {
                                map.entry(k).or_insert(val);
                            }
                        }
                        other => {
                            map.insert("anyOf".into(), Value::Array(vec![other]));
                        }
                    }
                }
            }
            for (_, child) in map.iter_mut() {
                drop_null(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
