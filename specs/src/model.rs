//! `[models.NAME]`: a model configuration of a built-in family.

use serde::Serialize;

use crate::decode::{Ctx, Table};
use crate::device::Device;
use crate::diagnostic::Diagnostic;
use crate::dtype::DType;
use crate::family::Family;
use crate::moe::MoeOptions;
use crate::source::{Loc, Located};

/// Keys a `[models.NAME]` table accepts (also checked against the JSON Schema in tests).
pub const KEYS: &[&str] = &[
    "family",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn",
    "vocab",
    "seq_len",
    "experts",
    "top_k",
    "routing_replay",
    "router",
    "expert_bias",
    "shared_expert_ffn",
    "capacity_factor",
    "drop_policy",
    "aux_loss_normalization",
    "tie_embeddings",
    "mtp_layers",
    "dtype",
    "device",
    "engine",
    "reference",
];

/// The numbers that define a model, without its name: two models with equal configs share one
/// reference job.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct ModelConfig {
    pub family: Family,
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub ffn: u32,
    pub vocab: u32,
    pub seq_len: u32,
    /// Routed experts per MoE layer (MoE only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub experts: Option<u32>,
    /// Experts each token is routed to (MoE only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// Whether mesh runs replay the reference's routing (MoE only; `None`: yes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_replay: Option<bool>,
    /// Router, shared expert and capacity options (MoE only; all unset: the defaults).
    #[serde(default, flatten)]
    pub moe: MoeOptions,
    /// One weight for the embedding and the output head (`None`: two weights).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tie_embeddings: Option<bool>,
    /// Multi-token prediction layers (DeepSeek-V3's MTP; `None`: none). The built-in engine
    /// builds one: the main model's last hidden state and the next token's embedding, each
    /// normed, concatenated and projected, through one more transformer layer and the shared
    /// output head, predicting the token after next ([`MTP_LOSS_SCALE`] of its loss added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtp_layers: Option<u32>,
    /// The `[engines.NAME]` that trains it; `None`: the built-in burn engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// A command engine model's own keys, as written, for the program's templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<(String, String)>,
}

/// The weight of the multi-token prediction loss in the training loss (Megatron's
/// `mtp_loss_scaling_factor` default, DeepSeek-V3's λ late in training), divided by the MTP
/// layers.
pub const MTP_LOSS_SCALE: f64 = 0.1;

impl ModelConfig {
    /// Whether the model has a multi-token prediction layer.
    pub fn mtp(&self) -> bool {
        self.mtp_layers.is_some_and(|n| n > 0)
    }

    /// Whether the last pipeline stage holds a copy of the embedding: the tied output head
    /// reads it, and so does the MTP layer (the next token's embedding), as in Megatron, whose
    /// embedding group all-reduces the copies' gradients.
    pub fn embedding_on_last_stage(&self) -> bool {
        self.tied() || self.mtp()
    }

    /// Whether the embedding weight is also the output head's.
    pub fn tied(&self) -> bool {
        self.tie_embeddings == Some(true)
    }

    /// Whether its mesh runs replay the reference's routing decisions, so need the
    /// reference's artifacts before they can train (a moe model, unless `routing_replay =
    /// false`).
    pub fn replays_routing(&self) -> bool {
        self.family.has_experts() && self.routing_replay != Some(false)
    }
}

/// A model as written, every field located for messages.
#[derive(Clone, Debug)]
pub struct Model {
    pub name: Located<String>,
    pub family: Located<Family>,
    pub layers: Located<u32>,
    pub hidden: Located<u32>,
    pub heads: Located<u32>,
    pub kv_heads: Located<u32>,
    pub ffn: Located<u32>,
    pub vocab: Located<u32>,
    pub seq_len: Located<u32>,
    pub experts: Option<Located<u32>>,
    pub top_k: Option<Located<u32>>,
    pub routing_replay: Option<Located<bool>>,
    pub moe: MoeOptions,
    pub tie_embeddings: Option<Located<bool>>,
    pub mtp_layers: Option<Located<u32>>,
    /// Where `shared_expert_ffn` is written (mesh rules point at it).
    pub shared_expert_ffn: Option<Located<u32>>,
    /// `None`: the run's default dtype.
    pub dtype: Option<Located<DType>>,
    /// `None`: the run's device.
    pub device: Option<Located<Device>>,
    pub engine: Option<Located<String>>,
    /// The engine of the world-size-1 reference run, when it is not `engine` itself (e.g. a
    /// single-device script as the oracle of a distributed trainer).
    pub reference: Option<Located<String>>,
    pub params: Vec<(String, Located<String>)>,
    /// The whole table, for messages about the model as a whole.
    pub loc: Loc,
}

/// Small defaults: a five-line spec must run in seconds on a laptop CPU.
pub mod defaults {
    pub const LAYERS: u32 = 2;
    pub const HIDDEN: u32 = 64;
    pub const HEADS: u32 = 4;
    pub const FFN: u32 = 128;
    pub const VOCAB: u32 = 128;
    pub const SEQ_LEN: u32 = 16;
    pub const EXPERTS: u32 = 4;
    pub const TOP_K: u32 = 2;
}

impl Model {
    pub fn decode(cx: &mut Ctx<'_>, name: Located<String>, mut t: Table<'_, '_>) -> Option<Model> {
        let table_loc = t.loc.clone();
        let at = |v: u32| Located::new(v, table_loc.clone());
        let family = t.keyword::<Family>(cx, "family");
        let layers = t.positive(cx, "layers");
        let hidden = t.positive(cx, "hidden");
        let heads = t.positive(cx, "heads");
        let kv_heads = t.positive(cx, "kv_heads");
        let ffn = t.positive(cx, "ffn");
        let vocab = t.positive(cx, "vocab");
        let seq_len = t.positive(cx, "seq_len");
        let experts = t.positive(cx, "experts");
        let top_k = t.positive(cx, "top_k");
        let routing_replay = t.bool(cx, "routing_replay");
        let tie_embeddings = t.bool(cx, "tie_embeddings");
        let is_moe = family.as_ref().is_some_and(|f| f.value.has_experts());
        let mut unmoe = Vec::new();
        let (moe, shared_expert_ffn) = crate::moe::decode(cx, &mut t, is_moe, &mut unmoe);
        let dtype = t.keyword::<DType>(cx, "dtype");
        let device = t.device(cx, "device");
        let engine = t.string(cx, "engine");
        let reference = t.string(cx, "reference");
        // A user's program reads `mtp_layers` as one of its own keys (below); the built-in
        // engine builds the layer.
        let mtp_layers = engine
            .is_none()
            .then(|| t.u64(cx, "mtp_layers"))
            .flatten()
            .map(|n| Located::new(n.value.min(u64::from(u32::MAX)) as u32, n.loc));
        // A user's program takes whatever keys it likes; the built-in engine takes only its own.
        let params = if engine.is_some() {
            t.rest(cx)
        } else {
            Vec::new()
        };
        let loc = t.loc.clone();
        let family = family.unwrap_or_else(|| Located::new(Family::Llama, loc.clone()));
        let heads = heads.unwrap_or_else(|| at(defaults::HEADS));
        let (experts, top_k) = if family.value.has_experts() {
            (
                Some(experts.unwrap_or_else(|| at(defaults::EXPERTS))),
                Some(top_k.unwrap_or_else(|| at(defaults::TOP_K))),
            )
        } else {
            let replay = routing_replay.as_ref().map(|r| ("routing_replay", &r.loc));
            let moe_keys = unmoe.iter().map(|(k, l)| (*k, l));
            for field in [
                experts.as_ref().map(|e| ("experts", &e.loc)),
                top_k.as_ref().map(|k| ("top_k", &k.loc)),
                replay,
            ]
            .into_iter()
            .flatten()
            .chain(moe_keys)
            {
                cx.error(
                    Diagnostic::error(
                        field.1,
                        format!("`{}` only applies to family `moe`", field.0),
                    )
                    .label(format!(
                        "model `{}` is family `{}`",
                        name.value,
                        family.value.as_str()
                    ))
                    .help("remove it, or set `family = \"moe\"`"),
                );
            }
            (None, None)
        };
        let model = Model {
            name,
            family,
            layers: layers.unwrap_or_else(|| at(defaults::LAYERS)),
            hidden: hidden.unwrap_or_else(|| at(defaults::HIDDEN)),
            kv_heads: kv_heads.unwrap_or_else(|| heads.clone()),
            heads,
            ffn: ffn.unwrap_or_else(|| at(defaults::FFN)),
            vocab: vocab.unwrap_or_else(|| at(defaults::VOCAB)),
            seq_len: seq_len.unwrap_or_else(|| at(defaults::SEQ_LEN)),
            experts,
            top_k,
            routing_replay,
            moe,
            tie_embeddings,
            mtp_layers,
            shared_expert_ffn,
            dtype,
            device,
            engine,
            reference,
            params,
            loc,
        };
        t.finish(cx);
        if model.engine.is_none() {
            model.check_shape(cx);
        }
        Some(model)
    }

    /// Shape rules of the model alone, independent of any mesh.
    fn check_shape(&self, cx: &mut Ctx<'_>) {
        let name = &self.name.value;
        if !self.hidden.value.is_multiple_of(self.heads.value) {
            cx.error(
                Diagnostic::error(
                    &self.hidden.loc,
                    format!(
                        "model `{name}`: hidden ({}) is not divisible by heads ({})",
                        self.hidden.value, self.heads.value
                    ),
                )
                .help(
                    "attention splits hidden evenly across heads; pick hidden = heads × head_dim",
                ),
            );
        } else if !(self.hidden.value / self.heads.value).is_multiple_of(2) {
            cx.error(
                Diagnostic::error(
                    &self.hidden.loc,
                    format!(
                        "model `{name}`: head dimension hidden/heads = {} is odd",
                        self.hidden.value / self.heads.value
                    ),
                )
                .help("rotary embeddings rotate pairs of channels; use an even head dimension"),
            );
        }
        if !self.heads.value.is_multiple_of(self.kv_heads.value) {
            cx.error(
                Diagnostic::error(
                    &self.kv_heads.loc,
                    format!(
                        "model `{name}`: heads ({}) is not a multiple of kv_heads ({})",
                        self.heads.value, self.kv_heads.value
                    ),
                )
                .help(
                    "grouped-query attention shares each kv head among heads/kv_heads query heads",
                ),
            );
        }
        if self.seq_len.value < 2 {
            cx.error(
                Diagnostic::error(
                    &self.seq_len.loc,
                    format!("model `{name}`: seq_len must be at least 2"),
                )
                .help("next-token prediction needs at least one input and one target token"),
            );
        }
        if self.vocab.value < 2 {
            cx.error(
                Diagnostic::error(
                    &self.vocab.loc,
                    format!("model `{name}`: vocab must be at least 2"),
                )
                .help("token 0 is padding; the synthetic data needs at least one other token"),
            );
        }
        self.check_mtp(cx);
        if let (Some(experts), Some(top_k)) = (&self.experts, &self.top_k) {
            if top_k.value > experts.value {
                cx.error(
                    Diagnostic::error(
                        &top_k.loc,
                        format!(
                            "model `{name}`: top_k ({}) exceeds experts ({})",
                            top_k.value, experts.value
                        ),
                    )
                    .help("each token is routed to top_k distinct experts"),
                );
            }
        }
    }

    /// The built-in engine builds one multi-token prediction layer, on the dense family.
    fn check_mtp(&self, cx: &mut Ctx<'_>) {
        let Some(m) = self.mtp_layers.as_ref().filter(|m| m.value > 0) else {
            return;
        };
        let name = &self.name.value;
        if m.value > 1 {
            cx.error(
                Diagnostic::error(
                    &m.loc,
                    format!(
                        "model `{name}`: mtp_layers = {} — the built-in engine builds one",
                        m.value
                    ),
                )
                .label("more than one MTP layer")
                .help("use `mtp_layers = 1` (DeepSeek-V3's depth), or 0 for none"),
            );
        }
        if self.family.value.has_experts() {
            cx.error(
                Diagnostic::error(
                    &m.loc,
                    format!("model `{name}`: mtp_layers is built for family `llama` only"),
                )
                .label(format!("model `{name}` is family `moe`"))
                .help("remove `mtp_layers`, or check MTP on a dense model"),
            );
        }
    }

    /// The configuration the world-size-1 reference runs: on `reference`'s engine if given.
    pub fn reference_config(&self) -> ModelConfig {
        let mut config = self.config();
        if let Some(r) = &self.reference {
            config.engine = Some(r.value.clone());
        }
        config
    }

    pub fn config(&self) -> ModelConfig {
        ModelConfig {
            family: self.family.value,
            layers: self.layers.value,
            hidden: self.hidden.value,
            heads: self.heads.value,
            kv_heads: self.kv_heads.value,
            ffn: self.ffn.value,
            vocab: self.vocab.value,
            seq_len: self.seq_len.value,
            experts: self.experts.as_ref().map(|e| e.value),
            top_k: self.top_k.as_ref().map(|k| k.value),
            routing_replay: self.routing_replay.as_ref().map(|r| r.value),
            moe: self.moe.clone(),
            tie_embeddings: self.tie_embeddings.as_ref().map(|t| t.value),
            mtp_layers: self.mtp_layers.as_ref().map(|m| m.value),
            engine: self.engine.as_ref().map(|e| e.value.clone()),
            params: self
                .params
                .iter()
                .map(|(k, v)| (k.clone(), v.value.clone()))
                .collect(),
        }
    }
}
