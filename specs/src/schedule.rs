//! `[run]`'s learning-rate schedule and weight decay: where a sharded optimizer's step counter
//! and its decay exemptions go wrong, so the built-in engine has them as production stacks do
//! (Megatron's `--lr-warmup-iters`, `--lr-decay-style`, `--min-lr`, `--weight-decay` with norms
//! and biases exempt).

use serde::Serialize;

use crate::decode::Keyword;

/// How the learning rate falls after warmup, over the rest of the run's steps.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LrDecay {
    Constant,
    Linear,
    Cosine,
}

impl Keyword for LrDecay {
    const WHAT: &'static str = "learning-rate decay";
    const ALL: &'static [(&'static str, Self)] = &[
        ("constant", LrDecay::Constant),
        ("linear", LrDecay::Linear),
        ("cosine", LrDecay::Cosine),
    ];
}

/// A warmup from 0 then a decay to `min_lr` at the run's last step.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct LrSchedule {
    pub warmup_steps: u32,
    pub decay: LrDecay,
    pub min_lr: f64,
}

impl LrSchedule {
    /// The learning rate of step `t` (0-based) of a run of `steps` steps at peak `lr`: linear
    /// warmup over `warmup_steps` (step t at (t + 1)/warmup of the peak, so the first step
    /// moves), then the decay from the peak at the first step after warmup to `min_lr` at the
    /// last. The horizon is the run's configured steps, so a run stopped early (the oracle
    /// level's) uses the same rates as the whole run.
    pub fn lr_at(&self, lr: f64, steps: u32, t: u32) -> f64 {
        if t < self.warmup_steps {
            return lr * f64::from(t + 1) / f64::from(self.warmup_steps);
        }
        let span = steps
            .saturating_sub(self.warmup_steps)
            .saturating_sub(1)
            .max(1);
        let progress = (f64::from(t - self.warmup_steps) / f64::from(span)).min(1.0);
        let fall = match self.decay {
            LrDecay::Constant => return lr,
            LrDecay::Linear => 1.0 - progress,
            LrDecay::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
        };
        self.min_lr + (lr - self.min_lr) * fall
    }
}

/// Whether weight decay applies to parameter `name`: matrices yes; norm weights and biases
/// no (Megatron's and torchtitan's default parameter groups).
pub fn decays(name: &str) -> bool {
    !(name.ends_with("norm.weight") || name.ends_with("bias"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_decay_to_the_floor_at_the_last_step() {
        let s = LrSchedule {
            warmup_steps: 2,
            decay: LrDecay::Cosine,
            min_lr: 1e-4,
        };
        let lrs: Vec<f64> = (0..6).map(|t| s.lr_at(1e-3, 6, t)).collect();
        assert_eq!(lrs[0], 5e-4);
        assert_eq!(lrs[1], 1e-3);
        assert_eq!(lrs[2], 1e-3);
        assert!((lrs[5] - 1e-4).abs() < 1e-15, "{lrs:?}");
        assert!(lrs.windows(2).skip(2).all(|w| w[1] < w[0]), "{lrs:?}");
        let linear = LrSchedule {
            decay: LrDecay::Linear,
            ..s
        };
        assert!((linear.lr_at(1e-3, 6, 4) - (1e-4 + 9e-4 / 3.0)).abs() < 1e-15);
        let constant = LrSchedule {
            decay: LrDecay::Constant,
            ..s
        };
        assert_eq!(constant.lr_at(1e-3, 6, 5), 1e-3);
    }

    #[test]
    fn norms_and_biases_are_exempt_from_decay() {
        assert!(decays("layers.0.attn.q.weight") && decays("embed.weight"));
        assert!(!decays("layers.0.attn_norm.weight") && !decays("norm.weight"));
        assert!(!decays("layers.1.mlp.router.bias"));
    }
}
