//! Optimizers as elementwise updates, so a shard's update equals the matching block of the full
//! tensor's update: the oracle and every rank run this same code.

use burn::tensor::Tensor;
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
}

impl Optimizer {
    pub fn new(kind: Kind, lr: f64) -> Self {
        Self {
            kind,
            lr,
            step: 0,
            moments: IndexMap::new(),
        }
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
            let g = g.clone();
            *p = match self.kind {
                Kind::Sgd => p.clone() - g * self.lr,
                Kind::Adamw => {
                    let (m, v) = self
                        .moments
                        .swap_remove(name)
                        .unwrap_or_else(|| (g.zeros_like(), g.zeros_like()));
                    let m = m * BETA1 + g.clone() * (1.0 - BETA1);
                    let v = v * BETA2 + g.powi_scalar(2) * (1.0 - BETA2);
                    let mhat = m.clone() / (1.0 - BETA1.powi(self.step));
                    let vhat = v.clone() / (1.0 - BETA2.powi(self.step));
                    self.moments.insert(name.clone(), (m, v));
                    let decayed = p.clone() * (1.0 - self.lr * WEIGHT_DECAY);
                    decayed - mhat / (vhat.sqrt() + EPS) * self.lr
                }
            };
        }
    }
}
