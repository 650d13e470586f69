//! `[run]`: settings shared by every job of a spec.

use serde::Serialize;

use crate::decode::{Ctx, Keyword, Table};
use crate::device::Device;
use crate::diagnostic::Diagnostic;
use crate::dtype::DType;
use crate::schedule::{LrDecay, LrSchedule};
use crate::source::{Loc, Located};

pub use crate::features::{Dropout, Packing, Recompute};

pub mod keys;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    Sgd,
    Adamw,
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
    pub resume: Option<crate::mesh::ResumeFrom>,
    /// Steps after which a reference keeps its whole training state (weights as the optimizer
    /// holds them, moments, counters): the `[[resume]]` pairs' checkpoint steps and
    /// `oracle_steps`, which a pair's saved and final states are judged against. Set on the
    /// reference of a spec with pairs; empty elsewhere, and absent from the serialized form so
    /// every other job keeps its identity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states_at: Vec<u32>,
}

/// `[run]`'s defaults: every optional feature off, as a spec that sets none of them trains.
impl Default for Training {
    fn default() -> Self {
        Training {
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
        }
    }
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
            training: Training::default(),
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
            .filter(|n| crate::names::check_name(cx, "run", n))
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
        } else {
            // The default never asks for more steps than the run has (`steps = 1`): a program
            // told to record its weights after a step it never takes writes none.
            run.training.oracle_steps = run.training.oracle_steps.min(run.training.steps);
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
        let features = crate::features::read(cx, &mut t);
        run.training.label_smoothing = features.label_smoothing;
        run.training.z_loss = features.z_loss;
        run.training.dropout = features.dropout;
        run.training.recompute = features.recompute;
        run.training.packing = features.packing;
        run.padding = features.padding;
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
