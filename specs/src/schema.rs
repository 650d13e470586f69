//! JSON Schema of the spec format, for editors (taplo / Even Better TOML, Tombi).
//!
//! The decoder reads tables by hand (for spans and all-errors-at-once), so these structs exist
//! only to describe the format; a test keeps their keys equal to the keys the decoder accepts.

#![allow(dead_code, clippy::large_enum_variant)]

use indexmap::IndexMap;
use schemars::JsonSchema;

use crate::device::Device;
use crate::dtype::DType;
use crate::family::Family;
use crate::level::Level;
use crate::mesh::MeshSchema as Mesh;
use crate::run::Optimizer;
use crate::tolerance::CurveMode;

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

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Run {
    /// Run name (default: the spec's file name).
    name: Option<String>,
    /// Seed for initialization and data (default 1234).
    seed: Option<u64>,
    /// Default dtype of models that set none (default f32).
    dtype: Option<DType>,
    /// Training steps for the curve level (default 4).
    #[schemars(range(min = 1))]
    steps: Option<u32>,
    /// Steps after which the oracle level compares gradients and weights (default 2).
    #[schemars(range(min = 1))]
    oracle_steps: Option<u32>,
    /// Global batch in sequences; must divide by dp × microbatches of every mesh (default 8).
    #[schemars(range(min = 1))]
    batch: Option<u32>,
    /// Optimizer (default adamw).
    optimizer: Option<Optimizer>,
    /// Learning rate (default 1e-3).
    lr: Option<f64>,
    /// Clip gradients to this global L2 norm (over every parameter, as one device sees them);
    /// default: no clipping. The norm before clipping is compared either way (`grad_norm`).
    #[schemars(range(min = 0))]
    clip_grad_norm: Option<f64>,
    /// Decoupled weight decay of the weight matrices (norms and biases exempt); default: AdamW's
    /// 0.01 on every parameter.
    #[schemars(range(min = 0))]
    weight_decay: Option<f64>,
    /// Steps of linear learning-rate warmup (fewer than `steps`; default 0).
    warmup_steps: Option<u32>,
    /// Learning-rate decay after warmup, to `min_lr` at the last step: constant (default),
    /// linear or cosine.
    lr_decay: Option<crate::schedule::LrDecay>,
    /// The learning rate the decay ends at (default 0; at most `lr`).
    #[schemars(range(min = 0))]
    min_lr: Option<f64>,
    /// Output directory for runs (default meshparity-out).
    output: Option<String>,
    /// Device of every model that sets none: cpu (default), gpu or gpu:N.
    device: Option<Device>,
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
        "capacity_factor", "drop_policy", "tie_embeddings", "dtype", "device", "engine",
        "reference"
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
    /// One weight for the embedding and the output head (default false): the output head is
    /// the embedding transposed; with pp > 1 the first and last stages each hold it and
    /// all-reduce its gradient (Megatron's embedding group); with TP it is vocab-parallel in
    /// both uses.
    tie_embeddings: Option<bool>,
    /// Dtype (default: [run] dtype).
    dtype: Option<DType>,
    /// Device (default: [run] device).
    device: Option<Device>,
}

/// A command engine: your program, its arguments as `{{name}}` templates over the job's values
/// (dp tp pp cp ep etp sp microbatches zero shard schedule world_size seed steps oracle_steps batch lr
/// clip_grad_norm weight_decay warmup_steps lr_decay min_lr optimizer dtype out_dir spec_dir
/// mutation, the model's sizes, tie_embeddings and its own keys).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Engine {
    /// The only kind: "command".
    kind: EngineKind,
    /// The executable (a template), found on PATH or relative to `cwd`.
    program: String,
    /// Arguments (templates), passed as an argv: no shell unless `shell = true`.
    args: Option<Vec<String>>,
    /// Run `program` and `args` as one `sh -c` line, every value shell-quoted.
    shell: Option<bool>,
    /// Extra environment (templates).
    env: Option<IndexMap<String, String>>,
    /// Working directory (a template), relative to this file (default: this file's directory).
    cwd: Option<String>,
    /// Where the program writes each artifact, relative to `{{out_dir}}`.
    artifacts: Option<EngineArtifacts>,
    /// Bugs the program can inject: extra args, or a table with args, env and needs.
    mutations: Option<IndexMap<String, EngineMutation>>,
    /// "rerun" (default): a failure is localized by running the program again with
    /// `{{trace_dir}}` set; "always": every run traces (needs `artifacts.trace`), and a failure
    /// is localized from the run's own traces.
    trace: Option<TraceMode>,
}

#[derive(JsonSchema)]
#[schemars(rename_all = "lowercase")]
#[allow(dead_code)]
enum TraceMode {
    Rerun,
    Always,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Variant {
    /// A branch, tag or commit of the repository holding the spec (default: the working tree).
    git: Option<String>,
    /// Runs: 2 on the baseline gives the run-to-run envelope curves are judged against.
    #[schemars(range(min = 1, max = 2))]
    repeats: Option<u32>,
}

#[derive(JsonSchema)]
#[schemars(rename_all = "lowercase")]
enum EngineKind {
    Command,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct EngineArtifacts {
    /// Per-step metrics, JSON Lines.
    curve: Option<String>,
    /// First-step logits (and loss), safetensors.
    logits: Option<String>,
    /// First-step gradients, safetensors.
    grads: Option<String>,
    /// Final weights, safetensors.
    weights: Option<String>,
    /// Initial weights, safetensors (the oracle level then compares weight updates).
    initial: Option<String>,
    /// The old name of `initial` (read, with a warning).
    #[deprecated]
    checkpoint: Option<String>,
    /// `{{seed_checkpoint}}` saved sharded for the mesh and loaded back (the roundtrip level).
    roundtrip: Option<String>,
    /// Directory of per-site traces the program writes when `{{trace_dir}}` is set: sites.txt
    /// (site names in the order they ran) and step{S}.safetensors (whole-batch values).
    trace: Option<String>,
    /// Key of the step number in `curve` (default step).
    step_key: Option<String>,
    /// Key of the loss in `curve` (default loss).
    loss_key: Option<String>,
    /// Loss curve from the program's output: megatron, torchtitan, pithtrain, or a regex with
    /// named groups step and loss.
    log: Option<String>,
    /// Metrics of `curve` gated beside the loss (grad_norm is gated by default when present);
    /// any other metric that is no performance figure is left out, and the level says so.
    gate: Option<Vec<String>>,
}

#[derive(JsonSchema)]
#[schemars(untagged)]
enum EngineMutation {
    Args(Vec<String>),
    Table(EngineMutationTable),
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct EngineMutationTable {
    /// Extra arguments (templates).
    args: Option<Vec<String>>,
    /// Extra environment (templates).
    env: Option<IndexMap<String, String>>,
    /// What a mesh needs for the bug to exist.
    #[schemars(schema_with = "needs_names", default)]
    needs: Option<Vec<String>>,
}

/// `"exact"` or a table of limits.
#[derive(JsonSchema)]
#[schemars(untagged)]
enum LimitsOrExact {
    Exact(ExactKeyword),
    Limits(Limits),
}

#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
enum ExactKeyword {
    Exact,
}

/// Metric limits. Which keys a level accepts: forward: atol rtol max_abs max_rel mean_abs_pct
/// relative_l2 cosine top1 top1_decided topk k; routing: overlap mismatch failing_microbatches;
/// curve: mode rel
/// allowed_failing_steps investigate fail; oracle: the forward ones but top1/topk/k, plus
/// layer_average and grad_norm.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Limits {
    atol: Option<f64>,
    rtol: Option<f64>,
    max_abs: Option<f64>,
    max_rel: Option<f64>,
    mean_abs_pct: Option<f64>,
    relative_l2: Option<f64>,
    /// Minimum cosine similarity.
    cosine: Option<f64>,
    /// Minimum fraction of tokens whose top-1 logit agrees.
    top1: Option<f64>,
    /// Minimum top-1 agreement over the tokens whose reference top-two margin exceeds the
    /// dtype's round-off (near-ties reported apart).
    top1_decided: Option<f64>,
    /// Minimum top-k agreement.
    topk: Option<f64>,
    k: Option<f64>,
    /// Minimum per-token set overlap of MoE top-k routing.
    overlap: Option<f64>,
    /// Maximum fraction of tokens routed differently (over the run, and per microbatch).
    mismatch: Option<f64>,
    /// Microbatches allowed over the mismatch fraction (routing; default 0).
    failing_microbatches: Option<f64>,
    mode: Option<CurveMode>,
    rel: Option<f64>,
    allowed_failing_steps: Option<f64>,
    investigate: Option<f64>,
    fail: Option<f64>,
    /// Gate on per-layer averages of the metrics (per-tensor rows are still reported).
    layer_average: Option<bool>,
    /// Oracle level: the largest relative difference of the first step's global gradient
    /// norm (`grad_norm`, beside the gradients).
    grad_norm: Option<f64>,
}

/// Limits for one level: `"exact"`, or per dtype.
#[derive(JsonSchema)]
#[schemars(untagged)]
enum LevelLimits {
    All(LimitsOrExact),
    PerDtype(PerDtype),
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct PerDtype {
    f64: Option<LimitsOrExact>,
    f32: Option<LimitsOrExact>,
    f16: Option<LimitsOrExact>,
    bf16: Option<LimitsOrExact>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Tolerances {
    /// Another table (or `builtin`) whose limits apply where this one has none.
    extends: Option<String>,
    /// Always bit-exact.
    roundtrip: Option<ExactKeyword>,
    forward: Option<LevelLimits>,
    routing: Option<LevelLimits>,
    curve: Option<LevelLimits>,
    oracle: Option<LevelLimits>,
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
mod tests {
    use super::*;

    use crate::decode::Keyword;

    fn keys(v: &serde_json::Value, def: &str) -> Vec<String> {
        let props = if def.is_empty() {
            &v["properties"]
        } else {
            &v["definitions"][def]["properties"]
        };
        let mut k: Vec<String> = props.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    }

    fn sorted(k: &[&str]) -> Vec<String> {
        let mut k: Vec<String> = k.iter().map(|s| s.to_string()).collect();
        k.sort();
        k
    }

    #[test]
    fn schema_keys_match_the_decoder() {
        let v: serde_json::Value = serde_json::from_str(&json_schema()).unwrap();
        assert_eq!(v["$schema"], "http://json-schema.org/draft-07/schema#");
        assert_eq!(keys(&v, ""), sorted(crate::document::KEYS));
        assert_eq!(keys(&v, "Run"), sorted(crate::run::KEYS));
        assert_eq!(keys(&v, "Model"), sorted(crate::model::KEYS));
        let closed: Vec<&str> = v["definitions"]["Model"]["then"]["propertyNames"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        assert_eq!(sorted(&closed), sorted(crate::model::KEYS));
        assert_eq!(keys(&v, "Mesh"), sorted(crate::mesh::KEYS));
        assert_eq!(keys(&v, "Engine"), sorted(crate::engine::KEYS));
        assert_eq!(keys(&v, "Variant"), sorted(crate::variant::KEYS));
        assert_eq!(keys(&v, "Executor"), sorted(crate::executor::KEYS));
        assert_eq!(
            keys(&v, "EngineArtifacts"),
            sorted(crate::engine::ARTIFACT_KEYS)
        );
        assert_eq!(
            keys(&v, "EngineMutationTable"),
            sorted(crate::engine::MUTATION_KEYS)
        );
        assert_eq!(keys(&v, "MatrixEntry"), sorted(crate::matrix::KEYS));
        assert_eq!(keys(&v, "Exclude"), sorted(crate::matrix::EXCLUDE_KEYS));
        assert_eq!(keys(&v, "Mutations"), sorted(crate::mutation::KEYS));
        let mut limit_keys: Vec<&str> = crate::level::Level::ALL
            .iter()
            .flat_map(|(_, l)| crate::tolerance::limit_keys(*l).iter().copied())
            .collect();
        limit_keys.sort();
        limit_keys.dedup();
        assert_eq!(keys(&v, "Limits"), sorted(&limit_keys));
    }
}
