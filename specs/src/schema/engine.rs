//! The schema of `[engines.NAME]` (command engines) and `[variants.NAME]`.

use indexmap::IndexMap;
use schemars::JsonSchema;

use super::needs_names;

/// A command engine: your program, its arguments as `{{name}}` templates over the job's values (dp
/// tp pp cp ep etp sp microbatches zero shard schedule virtual_stages world_size seed dtype steps
/// oracle_steps batch optimizer lr clip_grad_norm weight_decay label_smoothing z_loss
/// attention_dropout hidden_dropout recompute packed_sequences mask_prompts pad_documents_to
/// warmup_steps lr_decay min_lr weights_after out_dir spec_dir mutation seed_checkpoint trace_dir
/// save_at save_dir resume_from loaded_dir state_at state_dir variant variant_dir, the model's
/// sizes, tie_embeddings, a moe's experts and top_k, its own keys and the engine's `defaults`;
/// docs/spec-format.md says what each holds).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Engine {
    /// The only kind: "command".
    pub(super) kind: EngineKind,
    /// The executable (a template), found on PATH or relative to `cwd`.
    pub(super) program: String,
    /// Arguments (templates), passed as an argv: no shell unless `shell = true`.
    pub(super) args: Option<Vec<String>>,
    /// Run `program` and `args` as one `sh -c` line, every value shell-quoted.
    pub(super) shell: Option<bool>,
    /// Extra environment (templates).
    pub(super) env: Option<IndexMap<String, String>>,
    /// Values the templates may name that a model need not set (`architecture = "llama"`): a
    /// model's own key of that name, or a value meshparity sets, wins.
    pub(super) defaults: Option<IndexMap<String, String>>,
    /// Working directory (a template), relative to this file (default: this file's directory).
    pub(super) cwd: Option<String>,
    /// Where the program writes each artifact, relative to `{{out_dir}}`.
    pub(super) artifacts: Option<EngineArtifacts>,
    /// Bugs the program can inject: extra args, or a table with args, env and needs.
    pub(super) mutations: Option<IndexMap<String, EngineMutation>>,
    /// "rerun" (default): a failure is localized by running the program again with
    /// `{{trace_dir}}` set; "always": every run traces (needs `artifacts.trace`), and a failure
    /// is localized from the run's own traces.
    pub(super) trace: Option<TraceMode>,
    /// The values `run`'s shrink may lower to find a failure's smallest repro, each with its
    /// floor (nothing shrinks without this table).
    pub(super) shrink: Option<EngineShrink>,
}

/// `[engines.NAME.shrink]`: value = the lowest it may go.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct EngineShrink {
    #[schemars(range(min = 1))]
    pub(super) layers: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) hidden: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) heads: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) kv_heads: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) ffn: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) vocab: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) seq_len: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) experts: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) batch: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) steps: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) dp: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) tp: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) pp: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) cp: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) ep: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) etp: Option<u32>,
    #[schemars(range(min = 1))]
    pub(super) microbatches: Option<u32>,
}

#[derive(JsonSchema)]
#[schemars(rename_all = "lowercase")]
#[allow(dead_code)]
pub(super) enum TraceMode {
    Rerun,
    Always,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Variant {
    /// A branch, tag or commit of the repository holding the spec (default: the working tree).
    pub(super) git: Option<String>,
    /// Runs: 2 on the baseline gives the run-to-run envelope curves are judged against.
    #[schemars(range(min = 1, max = 2))]
    pub(super) repeats: Option<u32>,
}

#[derive(JsonSchema)]
#[schemars(rename_all = "lowercase")]
pub(super) enum EngineKind {
    Command,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct EngineArtifacts {
    /// Per-step metrics, JSON Lines.
    pub(super) curve: Option<String>,
    /// First-step logits (and loss), safetensors.
    pub(super) logits: Option<String>,
    /// First-step gradients, safetensors.
    pub(super) grads: Option<String>,
    /// Final weights, safetensors.
    pub(super) weights: Option<String>,
    /// Initial weights, safetensors (the oracle level then compares weight updates).
    pub(super) initial: Option<String>,
    /// The old name of `initial` (read, with a warning).
    #[deprecated]
    pub(super) checkpoint: Option<String>,
    /// `{{seed_checkpoint}}` saved sharded for the mesh and loaded back (the roundtrip level).
    pub(super) roundtrip: Option<String>,
    /// Directory of per-site traces the program writes when `{{trace_dir}}` is set: sites.txt
    /// (site names in the order they ran) and step{S}.safetensors (whole-batch values).
    pub(super) trace: Option<String>,
    /// Each rank's digest of every parameter, grouped by the ranks that must hold the same bytes
    /// (JSON, as meshparity_hooks.torch writes it): a group that disagrees fails the oracle level.
    pub(super) digests: Option<String>,
    /// The rows each rank trained on, per step, as digests (JSON Lines, as
    /// meshparity_hooks.inputs writes it): held to the reference's rows at the same step by the
    /// forward (first step), curve and oracle levels, so a data position not restored on
    /// resumption or a sampler that ignores the rank is named as such.
    pub(super) inputs: Option<String>,
    /// The optimizer's state gathered to world-size-1 shapes (safetensors), written beside
    /// `weights` into {{save_dir}} when a [[resume]] pair's run saves, into {{loaded_dir}} when
    /// it loads (the roundtrip level holds what was loaded bit-equal to what was saved) and
    /// into {{state_dir}} after step {{state_at}} (judged at the oracle level).
    pub(super) optimizer: Option<String>,
    /// Key of the step number in `curve` (default step).
    pub(super) step_key: Option<String>,
    /// Key of the loss in `curve` (default loss).
    pub(super) loss_key: Option<String>,
    /// Loss curve from the program's output: megatron, torchtitan, pithtrain, or a regex with
    /// named groups step and loss.
    pub(super) log: Option<String>,
    /// Metrics of `curve` gated beside the loss (grad_norm is gated by default when present);
    /// any other metric that is no performance figure is left out, and the level says so.
    pub(super) gate: Option<Vec<String>>,
}

#[derive(JsonSchema)]
#[schemars(untagged)]
pub(super) enum EngineMutation {
    Args(Vec<String>),
    Table(EngineMutationTable),
}

#[derive(JsonSchema)]
#[schemars(untagged)]
pub(super) enum Sites {
    One(String),
    /// At least one glob: an empty list names no site (an error when read).
    Any(#[schemars(length(min = 1))] Vec<String>),
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct EngineMutationTable {
    /// Extra arguments (templates).
    pub(super) args: Option<Vec<String>>,
    /// Extra environment (templates).
    pub(super) env: Option<IndexMap<String, String>>,
    /// What a mesh needs for the bug to exist.
    #[schemars(schema_with = "needs_names", default)]
    pub(super) needs: Option<Vec<String>>,
    /// Where the program injects the bug: a glob on its traced site names (`grad.*norm*`), or
    /// a list of them, which localization's first divergence is checked against (any of them:
    /// where the layout decides where the bug first shows).
    pub(super) site: Option<Sites>,
    /// The models the bug exists for: globs on the spec's model names (default: every model
    /// of this engine), for a bug only one architecture can have.
    pub(super) models: Option<Vec<String>>,
}
