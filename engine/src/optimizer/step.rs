//! The optimizer step an engine records for the judge to replay (`optimizer-step.safetensors`):
//! the layout `meshparity_judge::optimizer_step` reads.

use meshparity_compare::TensorDtype;

use super::{EXP_AVG, EXP_AVG_SQ};
use crate::tensor::{HostTensor, Shards};

/// The step file's entries, for an engine that records one: `step`, then each parameter's
/// `grad.`, its `before.` weights and moments and its `after.` moments (`before`, `after`: the
/// weights and `optim.exp_avg(_sq).` moments under world-size-1 names, as a checkpoint's state
/// holds them; the weights after are the run's `weights.safetensors`).
pub fn entries(step: u64, grads: &Shards, before: &Shards, after: &Shards) -> Shards {
    let mut out = Shards::new();
    out.insert(
        "step".to_owned(),
        HostTensor {
            dtype: TensorDtype::U64,
            shape: vec![1],
            bytes: step.to_le_bytes().to_vec(),
        },
    );
    let state_of = |name: &str, s: &Shards, side: &str, weights: bool, out: &mut Shards| {
        let moments = [format!("{EXP_AVG}{name}"), format!("{EXP_AVG_SQ}{name}")];
        let keys = weights.then(|| name.to_owned()).into_iter().chain(moments);
        for key in keys {
            if let Some(t) = s.get(&key) {
                out.insert(format!("{side}.{key}"), t.clone());
            }
        }
    };
    for (name, g) in grads {
        if !before.contains_key(name) || !after.contains_key(name) {
            continue;
        }
        out.insert(format!("grad.{name}"), g.clone());
        state_of(name, before, "before", true, &mut out);
        state_of(name, after, "after", false, &mut out);
    }
    out
}
