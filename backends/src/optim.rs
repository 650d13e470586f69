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
use meshparity_specs::run::Optimizer as Kind;

/// AdamW constants (PyTorch defaults but for weight decay, kept small so it acts).
pub const BETA1: f64 = 0.9;
pub const BETA2: f64 = 0.999;
pub const EPS: f64 = 1e-8;
pub const WEIGHT_DECAY: f64 = 0.01;

/// One rank's (or the oracle's) optimizer and its state.
pub struct Optimizer {
    kind: Kind,
    lr: f64,
    step: i32,
    moments: IndexMap<String, (Tensor<2>, Tensor<2>)>,
    /// f32 master weights of half-precision parameters.
    master: IndexMap<String, Tensor<2>>,
}

/// The f32 master dtype of a half-precision parameter, if it needs one.
fn half(t: &Tensor<2>) -> Option<FloatDType> {
    match t.dtype() {
        DType::BF16 => Some(FloatDType::BF16),
        DType::F16 => Some(FloatDType::F16),
        _ => None,
    }
}

impl Optimizer {
    pub fn new(kind: Kind, lr: f64) -> Self {
        Self {
            kind,
            lr,
            step: 0,
            moments: IndexMap::new(),
            master: IndexMap::new(),
        }
    }

    /// The weights as the optimizer holds them: f32 master weights for half-precision
    /// parameters (what a mixed-precision checkpoint saves), the parameters themselves otherwise.
    pub fn weights(&self, params: &IndexMap<String, Tensor<2>>) -> IndexMap<String, Tensor<2>> {
        params
            .iter()
            .map(|(n, p)| (n.clone(), self.master.get(n).unwrap_or(p).clone()))
            .collect()
    }

    /// Update every parameter that has a gradient (parameters and gradients without autodiff).
    pub fn step(
        &mut self,
        params: &mut IndexMap<String, Tensor<2>>,
        grads: &IndexMap<String, Tensor<2>>,
    ) {
        self.step += 1;
        for (name, p) in params.iter_mut() {
            let Some(g) = grads.get(name) else { continue };
            let low = half(p);
            let (w, g) = match low {
                Some(_) => (
                    self.master
                        .swap_remove(name)
                        .unwrap_or_else(|| p.clone().cast(FloatDType::F32)),
                    g.clone().cast(FloatDType::F32),
                ),
                None => (p.clone(), g.clone()),
            };
            let w = self.update(name, w, g);
            *p = match low {
                Some(dtype) => {
                    self.master.insert(name.clone(), w.clone());
                    w.cast(dtype)
                }
                None => w,
            };
        }
    }

    /// One step of `p` with gradient `g`, in their own dtype.
    fn update(&mut self, name: &str, p: Tensor<2>, g: Tensor<2>) -> Tensor<2> {
        match self.kind {
            Kind::Sgd => p - g * self.lr,
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
                let decayed = p * (1.0 - self.lr * WEIGHT_DECAY);
                decayed - mhat / (vhat.sqrt() + EPS) * self.lr
            }
        }
    }
}
