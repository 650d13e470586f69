//! A mutation run judged in stages of growing run length, stopping at the first stage that
//! catches it: what mutation jobs and calibration sweeps run per mutated mesh, since most bugs
//! show in the first step and a whole run would train `steps` for each.

use std::path::Path;
use std::time::Instant;

use meshparity_specs::{Level, Limits};

use crate::check::{check, CheckError, Checked};
use meshparity_engine::engine::{Engine, RunRequest};

/// [`check`] for a mutation run, stopping at its first catch: the levels are judged in stages
/// of growing run length — those a one-step run answers (roundtrip, forward, routing), then
/// those within `oracle_steps` (oracle), then the rest (curve) — and a longer run is trained
/// only when every level so far passed. Most bugs show in the first step's logits or gradients,
/// so most mutation runs train one or two steps instead of `steps` (the first stage's run is
/// the first step's forward pass alone: [`Length::backward`]); a catalogued bug of the backward
/// pass or gradient finalization starts at the first stage that can see it (`first_stage`);
/// a bug only the curve catches costs the shorter runs more. An engine whose runs do not follow
/// the asked length ([`Engine::runs_to_length`]) is judged on one whole run. The outcomes are
/// those of the last stage run (a run caught early lists only the levels judged up to its
/// catch).
///
/// [`Length::backward`]: meshparity_engine::Length::backward
pub fn check_until_caught(
    engine: &dyn Engine,
    req: &RunRequest<'_>,
    levels: &[(Level, Limits)],
    reference: &Path,
    judged: &Path,
) -> Result<Checked, CheckError> {
    let mut once = FirstStages::default();
    check_until_caught_sharing(engine, req, levels, reference, judged, &mut once)
}

/// [`check_until_caught`] taking a first stage that is the first step's forward pass alone
/// from `shared` when a request that differs only in optimizer and learning rate has judged it
/// (and leaving it there for the next). That run reads neither, so the result is the same one.
pub fn check_until_caught_sharing(
    engine: &dyn Engine,
    req: &RunRequest<'_>,
    levels: &[(Level, Limits)],
    reference: &Path,
    judged: &Path,
    shared: &mut FirstStages,
) -> Result<Checked, CheckError> {
    let steps = |l: Level| {
        RunRequest {
            levels: &[l],
            ..*req
        }
        .length()
        .steps
        .max(1)
    };
    if !engine.runs_to_length() {
        return check(engine, req, levels, reference, judged);
    }
    let mut stages: Vec<usize> = levels.iter().map(|(l, _)| steps(*l)).collect();
    stages.sort_unstable();
    stages.dedup();
    let start = Instant::now();
    let mut checked = None;
    let first = first_stage(req.mutation, levels, &stages, steps);
    for (i, &until) in stages.iter().enumerate().skip(first) {
        let now: Vec<(Level, Limits)> = levels
            .iter()
            .filter(|(l, _)| steps(*l) <= until)
            .cloned()
            .collect();
        let asked: Vec<Level> = now.iter().map(|(l, _)| *l).collect();
        if i > first {
            // The previous stage passed: a longer run, from a clean directory. Only what the
            // stages wrote goes: `judged` may hold the caller's own files (a runner job's).
            let _ = std::fs::remove_dir_all(req.out);
            for (level, _) in levels {
                let _ = std::fs::remove_dir_all(judged.join(level.as_str()));
            }
        }
        let stage_req = RunRequest {
            levels: &asked,
            ..*req
        };
        let stage = shared.get_or_check(&stage_req, &now, || {
            check(engine, &stage_req, &now, reference, judged)
        })?;
        let caught = stage.outcomes.iter().any(|o| !o.passed);
        checked = Some(stage);
        if caught {
            break;
        }
    }
    let Some(last) = checked else {
        return check(engine, req, levels, reference, judged);
    };
    Ok(Checked {
        seconds: start.elapsed().as_secs_f64(),
        ..last
    })
}

/// First stages judged on the first step's forward pass alone, by what they ran: the request
/// with its optimizer and learning rate left out, and the levels with their limits. A sweep
/// over optimizers and learning rates keeps one per (model, dtype, seed) for its runs.
#[derive(Default)]
pub struct FirstStages {
    kept: std::collections::HashMap<String, Checked>,
}

impl FirstStages {
    fn get_or_check(
        &mut self,
        req: &RunRequest<'_>,
        levels: &[(Level, Limits)],
        check: impl FnOnce() -> Result<Checked, CheckError>,
    ) -> Result<Checked, CheckError> {
        if req.length().backward {
            return check();
        }
        let training = meshparity_specs::Training {
            optimizer: meshparity_specs::Optimizer::Sgd,
            lr: 0.0,
            clip_grad_norm: None,
            weight_decay: None,
            schedule: None,
            // Recompute changes no value a step computes; label smoothing, z-loss, dropout and
            // packing change the first forward, so they stay in the key.
            recompute: None,
            ..req.training.clone()
        };
        let key = format!(
            "{:?} {:?} {:?} {:?} {training:?} {levels:?}",
            req.model, req.mesh, req.dtype, req.mutation
        );
        if let Some(c) = self.kept.get(&key) {
            return Ok(c.clone());
        }
        let c = check()?;
        self.kept.insert(key, c.clone());
        Ok(c)
    }
}

/// The first of `stages` worth training for `mutation`. A catalogued bug of the backward pass or
/// of gradient finalization cannot change the first step's forward, so the stages whose levels
/// read only that (roundtrip, forward, routing) cannot catch it and are skipped. This saves the
/// run, not the judging: the next stage's run is judged at those levels too, so the verdict and
/// the first level that caught it are the same either way.
fn first_stage(
    mutation: Option<&str>,
    levels: &[(Level, Limits)],
    stages: &[usize],
    steps: impl Fn(Level) -> usize,
) -> usize {
    use meshparity_specs::catalog::{self, Phase};
    let after_backward = mutation.and_then(catalog::find).is_some_and(|m| {
        matches!(
            m.phase,
            Phase::Backward | Phase::Gradients | Phase::Optimizer
        )
    });
    if !after_backward {
        return 0;
    }
    let first_step_only = |until: usize| {
        levels
            .iter()
            .filter(|(l, _)| steps(*l) <= until)
            .all(|(l, _)| matches!(l, Level::Roundtrip | Level::Forward | Level::Routing))
    };
    // The last stage always runs: a mesh asked for first-step levels only is still judged.
    stages
        .iter()
        .position(|&until| !first_step_only(until))
        .unwrap_or(stages.len().saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshparity_engine::artifact::Manifest;
    use meshparity_specs::{Optimizer, Training};

    /// Steps per level as a spec with `steps = 6`, `oracle_steps = 2` gives them.
    fn steps(l: Level) -> usize {
        match l {
            Level::Roundtrip | Level::Forward | Level::Routing => 1,
            Level::Oracle | Level::Trace => 2,
            Level::Curve => 6,
        }
    }

    fn levels(ls: &[Level]) -> Vec<(Level, Limits)> {
        ls.iter().map(|&l| (l, Limits::exact())).collect()
    }

    #[test]
    fn only_bugs_after_the_forward_skip_the_first_step_stage() {
        let all = levels(&[
            Level::Roundtrip,
            Level::Forward,
            Level::Curve,
            Level::Oracle,
        ]);
        let stages = [1, 2, 6];
        let first = |m| first_stage(m, &all, &stages, steps);
        assert_eq!(first(Some("tp-skip-input-grad-all-reduce")), 1, "backward");
        assert_eq!(first(Some("dp-skip-grad-all-reduce")), 1, "gradients");
        assert_eq!(first(Some("tp-skip-forward-all-reduce")), 0, "forward");
        assert_eq!(first(Some("save-drops-tp-shards")), 0, "checkpoint");
        assert_eq!(first(Some("an-engines-own-bug")), 0, "not catalogued");
        assert_eq!(first(None), 0, "a correct run");
    }

    /// How many of `requests` `FirstStages` runs, in order.
    fn runs(requests: &[(Training, &[Level])]) -> usize {
        let model: meshparity_specs::ModelConfig = serde_json::from_value(serde_json::json!({
            "family": "llama", "layers": 2, "hidden": 8, "heads": 2, "kv_heads": 2, "ffn": 16,
            "vocab": 16, "seq_len": 4
        }))
        .expect("a model");
        let mut shared = FirstStages::default();
        let mut ran = 0;
        for (training, asked) in requests {
            let req = RunRequest {
                model: &model,
                training,
                dtype: meshparity_specs::DType::F32,
                mesh: Some(&meshparity_specs::MeshConfig::SINGLE),
                levels: asked,
                mutation: Some("tp-skip-forward-all-reduce"),
                reference: None,
                out: Path::new("unused"),
                trace: false,
            };
            let limits = levels(asked);
            let checked = shared.get_or_check(&req, &limits, || {
                ran += 1;
                Ok(Checked {
                    manifest: Manifest::default(),
                    outcomes: Vec::new(),
                    seconds: 0.0,
                })
            });
            assert!(checked.is_ok());
        }
        ran
    }

    #[test]
    fn a_forward_only_stage_is_shared_across_optimizers_and_learning_rates_only() {
        let t = Training {
            seed: 1,
            steps: 6,
            oracle_steps: 2,
            batch: 8,
            optimizer: Optimizer::Adamw,
            lr: 1e-3,
            ..Training::default()
        };
        let sgd = Training {
            optimizer: Optimizer::Sgd,
            lr: 1e-2,
            ..t.clone()
        };
        let seed2 = Training {
            seed: 2,
            ..t.clone()
        };
        let first: &[Level] = &[Level::Roundtrip, Level::Forward];
        let oracle: &[Level] = &[Level::Roundtrip, Level::Forward, Level::Oracle];
        assert_eq!(runs(&[(t.clone(), first), (sgd.clone(), first)]), 1);
        assert_eq!(
            runs(&[(t.clone(), first), (seed2, first)]),
            2,
            "another seed"
        );
        let packed = Training {
            packing: Some(meshparity_specs::Packing {
                documents: true,
                prompts: false,
                pad_to: None,
            }),
            ..t.clone()
        };
        assert_eq!(
            runs(&[(t.clone(), first), (packed, first)]),
            2,
            "packing changes the forward"
        );
        assert_eq!(
            runs(&[(t.clone(), first), (t.clone(), &[Level::Forward])]),
            2,
            "levels"
        );
        assert_eq!(
            runs(&[(t.clone(), oracle), (sgd, oracle)]),
            2,
            "a backward pass"
        );
    }

    #[test]
    fn a_mesh_with_first_step_levels_only_still_runs() {
        let forward = levels(&[Level::Forward]);
        let first = first_stage(Some("dp-skip-grad-all-reduce"), &forward, &[1], steps);
        assert_eq!(first, 0);
    }
}
