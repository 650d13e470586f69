//! `[run]`: settings shared by every job of a spec.

use serde::Serialize;

use crate::decode::{Ctx, Keyword, Table};
use crate::device::Device;
use crate::diagnostic::Diagnostic;
use crate::dtype::DType;
use crate::schedule::{LrDecay, LrSchedule};
use crate::source::{Loc, Located};

pub const KEYS: &[&str] = &[
    "name",
    "seed",
    "dtype",
    "steps",
    "oracle_steps",
    "batch",
    "optimizer",
    "lr",
    "clip_grad_norm",
    "weight_decay",
    "label_smoothing",
    "z_loss",
    "attention_dropout",
    "hidden_dropout",
    "recompute",
    "packed_sequences",
    "mask_prompts",
    "pad_documents_to",
    "warmup_steps",
    "lr_decay",
    "min_lr",
    "output",
    "device",
];

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    Sgd,
    Adamw,
}

/// Activation recompute (Megatron's `--recompute-granularity`): what the backward re-runs from
/// saved inputs instead of keeping its activations.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// Every transformer layer's attention and MLP blocks (a moe layer's routed experts are
    /// kept: their routing and auxiliary losses are the forward's).
    Full,
    /// What sits between the attention block's TP collectives: the q/k/v projections, RoPE,
    /// scores, softmax, dropout, values and the o projection (Megatron's selective recompute
    /// re-runs the core attention alone, without the projections).
    Selective,
}

impl Keyword for Recompute {
    const WHAT: &'static str = "recompute granularity";
    const ALL: &'static [(&'static str, Self)] = &[
        ("full", Recompute::Full),
        ("selective", Recompute::Selective),
    ];
}

impl Keyword for Optimizer {
    const WHAT: &'static str = "optimizer";
    const ALL: &'static [(&'static str, Self)] =
        &[("sgd", Optimizer::Sgd), ("adamw", Optimizer::Adamw)];
}

/// The parts of `[run]` that change what a job computes (and so its identity).
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Training {
    pub seed: u64,
    /// Training steps for the `curve` level.
    pub steps: u32,
    /// Steps after which `oracle` compares gradients and weights.
    pub oracle_steps: u32,
    /// Global batch in sequences, split over dp × microbatches.
    pub batch: u32,
    pub optimizer: Optimizer,
    pub lr: f64,
    /// Gradient clipping by the global L2 norm over every parameter (torch's
    /// `clip_grad_norm_`, Megatron's `--clip-grad`); `None` clips nothing. Absent from the
    /// serialized form when unset, so jobs without it keep their identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip_grad_norm: Option<f64>,
    /// Decoupled weight decay of the matrices, norms and biases exempt
    /// ([`crate::schedule::decays`]). `None`: AdamW's fixed 0.01 on every parameter, as before
    /// the key existed (and absent from the serialized form, so those jobs keep their identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f64>,
    /// Warmup and decay of the learning rate; `None`: `lr` at every step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<LrSchedule>,
    /// Label smoothing ε of the cross-entropy (torch's `label_smoothing`): each token's
    /// target is 1 − ε on its label plus ε spread uniformly over the whole vocabulary. `None`
    /// (or 0): none, and absent from the serialized form so those jobs keep their identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_smoothing: Option<f64>,
    /// The z-loss weight w (PaLM's auxiliary loss, 1e-4 there): each counted token adds
    /// w · (log Σ_j exp z_j)², normalized like the cross-entropy, so the softmax normalizer
    /// stays near 1. `None` (or 0): none, and absent from the serialized form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub z_loss: Option<f64>,
    /// Dropout on the attention probabilities and the residual branches. `None`: none, and
    /// absent from the serialized form so jobs without it keep their identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropout: Option<Dropout>,
    /// Activation recompute; `None`: every activation kept for backward, and absent from the
    /// serialized form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute: Option<Recompute>,
    /// How rows are filled with documents and which labels count; `None`: one document per row,
    /// every label but the padding's counted, and absent from the serialized form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packing: Option<Packing>,
    /// Set on the jobs of a `[[resume]]` pair's mesh: the run trains its first steps on another
    /// mesh, saves, and this mesh resumes from the checkpoint. `None` elsewhere, and absent
    /// from the serialized form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<crate::resume::ResumeFrom>,
    /// Steps after which a reference keeps its whole training state (weights as the optimizer
    /// holds them, moments, counters): the `[[resume]]` pairs' checkpoint steps and
    /// `oracle_steps`, which a pair's saved and final states are judged against. Set on the
    /// reference of a spec with pairs; empty elsewhere, and absent from the serialized form so
    /// every other job keeps its identity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states_at: Vec<u32>,
}

/// Packed sequences and loss masks, as fine-tuning stacks feed them (Megatron's
/// `--reset-position-ids --reset-attention-mask`, NeMo's packed sequences, HF's
/// `DataCollatorWithFlattening`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Packing {
    /// Several documents per row: attention stays inside a document, positions restart at each
    /// document's first token, and no label crosses a document boundary.
    pub documents: bool,
    /// Each document opens with a prompt whose labels are ignored (`-100`), as in supervised
    /// fine-tuning; valid-token counts then differ from row to row and document to document.
    pub prompts: bool,
    /// Each document padded to a multiple of this many tokens (`pad_documents_to`), as
    /// TransformerEngine's THD layout needs under context parallelism: CP then cuts every
    /// document, not every row, into 2·cp chunks. The padding is a document's tail of token 0
    /// with ignored labels. Absent from the serialized form when unset, so every other job
    /// keeps its identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_to: Option<u32>,
}

/// Megatron's two dropout probabilities (`--attention-dropout`, `--hidden-dropout`), each in
/// [0, 1). The masks are not random draws of a rank but a function of the run's seed, the step
/// and where they act (meshparity's engine), so a correct mesh drops exactly what world size 1
/// drops.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Dropout {
    /// On the attention probabilities (after the softmax, before the values).
    pub attention: f64,
    /// On each residual branch's output (attention's and the MLP's), before the residual add.
    pub hidden: f64,
}

impl Training {
    /// The learning rate of step `t` (0-based).
    pub fn lr_at(&self, t: u32) -> f64 {
        self.schedule
            .map_or(self.lr, |s| s.lr_at(self.lr, self.steps, t))
    }
}

#[derive(Clone, Debug)]
pub struct RunSettings {
    pub name: Option<String>,
    pub dtype: Located<DType>,
    pub training: Training,
    pub batch: Located<u32>,
    pub output: String,
    /// Where jobs compute unless a model says otherwise.
    pub device: Located<Device>,
    /// `pad_documents_to`, where it was written (the engine's copy is `training.packing`).
    pub padding: Option<Located<u32>>,
    pub loc: Loc,
}

pub mod defaults {
    pub const SEED: u64 = 1234;
    pub const STEPS: u32 = 4;
    /// The most training steps a spec may ask for (`steps = 1e9` ran until the timeout).
    pub const MAX_STEPS: u32 = 1_000_000;
    pub const ORACLE_STEPS: u32 = 2;
    pub const BATCH: u32 = 8;
    pub const LR: f64 = 1e-3;
    pub const OUTPUT: &str = "meshparity-out";
}

impl RunSettings {
    pub fn defaults(loc: Loc) -> Self {
        Self {
            name: None,
            dtype: Located::new(DType::F32, loc.clone()),
            training: Training {
                seed: defaults::SEED,
                steps: defaults::STEPS,
                oracle_steps: defaults::ORACLE_STEPS,
                batch: defaults::BATCH,
                optimizer: Optimizer::Adamw,
                lr: defaults::LR,
                clip_grad_norm: None,
                weight_decay: None,
                schedule: None,
                label_smoothing: None,
                z_loss: None,
                dropout: None,
                recompute: None,
                packing: None,
                resume: None,
                states_at: Vec::new(),
            },
            batch: Located::new(defaults::BATCH, loc.clone()),
            output: defaults::OUTPUT.to_owned(),
            device: Located::new(Device::Cpu, loc.clone()),
            padding: None,
            loc,
        }
    }

    pub fn decode(cx: &mut Ctx<'_>, mut t: Table<'_, '_>) -> Self {
        let mut run = Self::defaults(t.loc.clone());
        run.name = t
            .string(cx, "name")
            .filter(|n| crate::document::check_name(cx, "run", n))
            .map(|n| n.value);
        if let Some(s) = t.u64(cx, "seed") {
            run.training.seed = s.value;
        }
        if let Some(d) = t.keyword::<DType>(cx, "dtype") {
            run.dtype = d;
        }
        let steps = t.positive(cx, "steps");
        if let Some(s) = &steps {
            if s.value > defaults::MAX_STEPS {
                cx.error(
                    Diagnostic::error(
                        &s.loc,
                        format!(
                            "`run.steps` is {}; at most {} steps are checked",
                            s.value,
                            defaults::MAX_STEPS
                        ),
                    )
                    .help("parity shows in the first few steps; the curve level needs tens"),
                );
            }
            run.training.steps = s.value;
        }
        if let Some(s) = t.positive(cx, "oracle_steps") {
            if s.value > run.training.steps {
                cx.error(
                    Diagnostic::error(
                        &s.loc,
                        format!(
                            "`run.oracle_steps` ({}) is more than the run's steps ({}{})",
                            s.value,
                            run.training.steps,
                            if steps.is_some() { "" } else { ", the default" }
                        ),
                    )
                    .help(
                        "the oracle level compares weights after oracle_steps of the run's steps",
                    ),
                );
            }
            run.training.oracle_steps = s.value;
        }
        if let Some(b) = t.positive(cx, "batch") {
            run.training.batch = b.value;
            run.batch = b;
        }
        if let Some(o) = t.keyword::<Optimizer>(cx, "optimizer") {
            run.training.optimizer = o.value;
        }
        if let Some(lr) = t.limit(cx, "lr") {
            run.training.lr = lr.value;
        }
        if let Some(c) = t.limit(cx, "clip_grad_norm") {
            if c.value > 0.0 {
                run.training.clip_grad_norm = Some(c.value);
            } else {
                cx.error(
                    Diagnostic::error(&c.loc, "`run.clip_grad_norm` is 0: every step would be zero")
                        .help("leave the key out to train without clipping, or give the largest norm to keep (Megatron's default is 1.0)"),
                );
            }
        }
        run.training.weight_decay = t.limit(cx, "weight_decay").map(|w| w.value);
        run.training.label_smoothing = fraction(
            cx,
            &mut t,
            "label_smoothing",
            "the label itself would weigh nothing",
            "give ε in [0, 1), as torch and Megatron take it (0.1 is usual)",
        );
        run.training.z_loss = fraction(
            cx,
            &mut t,
            "z_loss",
            "the normalizer's penalty would outweigh the loss",
            "give the weight in [0, 1), as PaLM's 1e-4",
        );
        let dropped = "every activation would be dropped";
        let usual = "give a probability in [0, 1), as Megatron's --attention-dropout and --hidden-dropout (0.1 is usual)";
        let attention = fraction(cx, &mut t, "attention_dropout", dropped, usual);
        let hidden = fraction(cx, &mut t, "hidden_dropout", dropped, usual);
        run.training.dropout = (attention.is_some() || hidden.is_some()).then(|| Dropout {
            attention: attention.unwrap_or(0.0),
            hidden: hidden.unwrap_or(0.0),
        });
        run.training.recompute = t.keyword::<Recompute>(cx, "recompute").map(|r| r.value);
        let documents = t.bool(cx, "packed_sequences").is_some_and(|b| b.value);
        let prompts = t.bool(cx, "mask_prompts").is_some_and(|b| b.value);
        let padding = document_padding(cx, &mut t, documents);
        run.training.packing = (documents || prompts).then_some(Packing {
            documents,
            prompts,
            pad_to: padding.as_ref().map(|p| p.value),
        });
        run.padding = padding;
        run.training.schedule = schedule(cx, &mut t, &run.training);
        if let Some(o) = t.string(cx, "output") {
            run.output = o.value;
        }
        if let Some(d) = t.device(cx, "device") {
            run.device = d;
        }
        t.finish(cx);
        run
    }
}

/// `pad_documents_to`: at least 2, and only with `packed_sequences` (there are no documents
/// to pad otherwise). Whether it fits each mesh and model is [`crate::fit`]'s.
fn document_padding(
    cx: &mut Ctx<'_>,
    t: &mut Table<'_, '_>,
    documents: bool,
) -> Option<Located<u32>> {
    let v = t.positive(cx, "pad_documents_to")?;
    let problem = if !documents {
        Some((
            "`run.pad_documents_to` needs `packed_sequences = true`".to_owned(),
            "it pads each packed document for context parallelism's per-document chunks; set `packed_sequences = true` or remove it",
        ))
    } else if v.value < 2 {
        Some((
            format!("`run.pad_documents_to` is {}: nothing to pad to", v.value),
            "give a multiple of 2·cp for every mesh with context parallelism (8 covers cp 2 and 4)",
        ))
    } else {
        None
    };
    if let Some((message, help)) = problem {
        cx.error(Diagnostic::error(&v.loc, message).help(help.to_owned()));
        return None;
    }
    Some(v)
}

/// A `[run]` value in [0, 1) (a probability or weight), `None` when absent or 0; 1 or more is
/// an error saying `why` it cannot be and `help`.
fn fraction(
    cx: &mut Ctx<'_>,
    t: &mut Table<'_, '_>,
    key: &'static str,
    why: &str,
    help: &str,
) -> Option<f64> {
    let v = t.limit(cx, key)?;
    if v.value < 1.0 {
        return Some(v.value).filter(|&v| v > 0.0);
    }
    cx.error(
        Diagnostic::error(&v.loc, format!("`run.{key}` is 1 or more: {why}")).help(help.to_owned()),
    );
    None
}

/// `warmup_steps`, `lr_decay` and `min_lr`: a schedule when any is given (warmup 0, constant,
/// floor 0 for those left out), each checked against the run's steps and peak `lr`.
fn schedule(cx: &mut Ctx<'_>, t: &mut Table<'_, '_>, training: &Training) -> Option<LrSchedule> {
    let warmup = t.u64(cx, "warmup_steps");
    let decay = t.keyword::<LrDecay>(cx, "lr_decay");
    let min_lr = t.limit(cx, "min_lr");
    if warmup.is_none() && decay.is_none() && min_lr.is_none() {
        return None;
    }
    let mut s = LrSchedule {
        warmup_steps: 0,
        decay: decay.map_or(LrDecay::Constant, |d| d.value),
        min_lr: 0.0,
    };
    if let Some(w) = warmup {
        if w.value >= u64::from(training.steps) {
            cx.error(
                Diagnostic::error(
                    &w.loc,
                    format!(
                        "`run.warmup_steps` ({}) leaves none of the run's {} steps after warmup",
                        w.value, training.steps
                    ),
                )
                .help("warm up over fewer steps than `run.steps`"),
            );
        }
        s.warmup_steps = u32::try_from(w.value).unwrap_or(u32::MAX);
    }
    if let Some(m) = min_lr {
        if m.value > training.lr {
            cx.error(
                Diagnostic::error(
                    &m.loc,
                    format!(
                        "`run.min_lr` ({}) is above `run.lr` ({})",
                        m.value, training.lr
                    ),
                )
                .help("the schedule decays from lr down to min_lr"),
            );
        }
        s.min_lr = m.value;
    }
    Some(s)
}
