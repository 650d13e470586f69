//! Optimizers as elementwise updates, so a shard's update equals the matching block of the full
//! tensor's update: the oracle and every rank run this same code.
//!
//! Half-precision models train as mixed-precision stacks do (Megatron, torch AMP): the optimizer
//! keeps f32 master weights and f32 moments, and the model's bf16/f16 parameters are the master
//! weights cast down after each step. Updating bf16 weights in place would lose any update below
//! half a bf16 ULP of the weight (lr·g ≈ 1e-6 against a ULP of ≈ 1e-4 at |w| ≈ 0.02), so a
//! correct mesh and its oracle would differ by whole ULPs of quantization noise.

use burn::tensor::{DType, FloatDType, Tensor};
use indexmap::IndexMap;
use meshparity_specs::run::{Optimizer as Kind, Training};

/// World size 1's constants and decay groups, which the judge's replay of a mesh's step uses
/// too (`meshparity_engine::optimizer`).
pub use meshparity_engine::optimizer::{BETA1, BETA2, EPS, WEIGHT_DECAY};

/// One rank's (or the oracle's) optimizer and its state.
pub struct Optimizer {
    kind: Kind,
    /// The learning rate of each step, and the decay of each parameter, from `[run]`.
    training: Training,
    /// Updates done (AdamW's bias correction counts them).
    step: i32,
    /// Where the learning-rate schedule stands: one per update, unless a scheduler is stepped
    /// more often (the catalogued bug).
    schedule_step: u32,
    moments: IndexMap<String, (Tensor<2>, Tensor<2>)>,
    /// f32 master weights of half-precision parameters.
    master: IndexMap<String, Tensor<2>>,
    /// Every parameter decayed, the exempt ones too (a catalogued bug of sharded optimizers,
    /// which classify flat shards by shape).
    exemptions_lost: bool,
}

/// What a checkpoint keeps of an optimizer beside the weights: its counters and each
/// parameter's AdamW moments (the master weights are the weights it saves).
#[derive(Clone)]
pub struct OptState {
    /// Updates done (AdamW's bias correction counts them).
    pub step: u64,
    /// Where the learning-rate schedule stands.
    pub schedule_step: u64,
    /// (first, second) moments by parameter; empty for SGD and before the first update.
    pub moments: IndexMap<String, (Tensor<2>, Tensor<2>)>,
}

/// The half-precision dtype a parameter of `dtype` is, if it is one (and so needs an f32
/// master copy).
pub(crate) fn half(dtype: DType) -> Option<FloatDType> {
    match dtype {
        DType::BF16 => Some(FloatDType::BF16),
        DType::F16 => Some(FloatDType::F16),
        _ => None,
    }
}

impl Optimizer {
    pub fn new(training: &Training) -> Self {
        Self {
            kind: training.optimizer,
            training: training.clone(),
            step: 0,
            schedule_step: 0,
            moments: IndexMap::new(),
            master: IndexMap::new(),
            exemptions_lost: false,
        }
    }

    /// Decay every parameter from now on, norms and biases included (the catalogued
    /// `zero-decay-exemptions-lost`).
    pub fn lose_decay_exemptions(&mut self) {
        self.exemptions_lost = true;
    }

    /// The weights as the optimizer holds them: f32 master weights for half-precision
    /// parameters (what a mixed-precision checkpoint saves), the parameters themselves otherwise.
    pub fn weights(&self, params: &IndexMap<String, Tensor<2>>) -> IndexMap<String, Tensor<2>> {
        params
            .iter()
            .map(|(n, p)| (n.clone(), self.master.get(n).unwrap_or(p).clone()))
            .collect()
    }

    /// The state a checkpoint saves.
    pub fn state(&self) -> OptState {
        OptState {
            step: self.step as u64,
            schedule_step: u64::from(self.schedule_step),
            moments: self.moments.clone(),
        }
    }

    /// Continue from a checkpoint's state; `master` are the saved weights of half-precision
    /// parameters (f32), which the next update starts from as the run that saved them would.
    pub fn restore(&mut self, state: OptState, master: IndexMap<String, Tensor<2>>) {
        self.step = i32::try_from(state.step).unwrap_or(i32::MAX);
        self.schedule_step = u32::try_from(state.schedule_step).unwrap_or(u32::MAX);
        self.moments = state.moments;
        self.master = master;
    }

    /// Update every parameter that has a gradient (parameters and gradients without autodiff).
    pub fn step(
        &mut self,
        params: &mut IndexMap<String, Tensor<2>>,
        grads: &IndexMap<String, Tensor<2>>,
    ) {
        let lr = self.next_lr();
        self.step += 1;
        self.schedule_step += 1;
        for (name, p) in params.iter_mut() {
            let Some(g) = grads.get(name) else { continue };
            let low = half(p.dtype());
            let (w, g) = match low {
                Some(_) => (
                    self.master
                        .swap_remove(name)
                        .unwrap_or_else(|| p.clone().cast(FloatDType::F32)),
                    g.clone().cast(FloatDType::F32),
                ),
                None => (p.clone(), g.clone()),
            };
            let w = self.update(name, w, g, lr);
            *p = match low {
                Some(dtype) => {
                    self.master.insert(name.clone(), w.clone());
                    w.cast(dtype)
                }
                None => w,
            };
        }
    }

    /// The AdamW moments of parameter `name` (first, second), once it has been updated.
    pub fn moments(&self, name: &str) -> Option<&(Tensor<2>, Tensor<2>)> {
        self.moments.get(name)
    }

    /// The parameters with moments.
    pub fn moment_names(&self) -> impl Iterator<Item = &str> {
        self.moments.keys().map(String::as_str)
    }

    /// Move the moments of `name` the fraction `t` toward `other` (1: `other` taken as its
    /// own): the state of another shard associated with this one, a catalogued bug.
    pub fn blend_moments(&mut self, name: &str, other: &(Tensor<2>, Tensor<2>), t: f64) {
        if let Some((m, v)) = self.moments.get_mut(name) {
            *m = m.clone() * (1.0 - t) + other.0.clone() * t;
            *v = v.clone() * (1.0 - t) + other.1.clone() * t;
        }
    }

    /// The learning rate the next update uses.
    pub fn next_lr(&self) -> f64 {
        self.training.lr_at(self.schedule_step)
    }

    /// Step the learning-rate schedule `n` more times without an update.
    pub fn advance_schedule(&mut self, n: u32) {
        self.schedule_step += n;
    }

    /// One step of `p` with gradient `g` at learning rate `lr`, in their own dtype.
    fn update(&mut self, name: &str, p: Tensor<2>, g: Tensor<2>, lr: f64) -> Tensor<2> {
        let decay = self.decay(name);
        let p = if decay > 0.0 {
            p * (1.0 - lr * decay)
        } else {
            p
        };
        match self.kind {
            Kind::Sgd => p - g * lr,
            Kind::Adamw => {
                let (m, v) = self
                    .moments
                    .swap_remove(name)
                    .unwrap_or_else(|| (g.zeros_like(), g.zeros_like()));
                let m = m * BETA1 + g.clone() * (1.0 - BETA1);
                let v = v * BETA2 + g.powi_scalar(2) * (1.0 - BETA2);
                let mhat = m.clone() / (1.0 - BETA1.powi(self.step));
                let vhat = v.clone() / (1.0 - BETA2.powi(self.step));
                self.moments.insert(name.to_owned(), (m, v));
                p - mhat / (vhat.sqrt() + EPS) * lr
            }
        }
    }

    /// The decoupled weight decay of parameter `name`: its group's
    /// (`meshparity_engine::optimizer::decay`), or `[run] weight_decay` on every parameter once
    /// the exemptions are lost.
    fn decay(&self, name: &str) -> f64 {
        match self.training.weight_decay {
            Some(wd) if self.exemptions_lost => wd,
            _ => meshparity_engine::optimizer::decay(&self.training, name),
        }
    }
}
