//! One level on one mesh: run it, write the candidate's artifacts, judge them against the
//! reference's.

use std::path::Path;
use std::time::Instant;

use meshparity_compare::{
    compare_checkpoints, compare_curves, tolerance, CurveOptions, Profile, TensorOptions, Tolerance,
};
use meshparity_specs::{Keyword, Level, Limits, MeshConfig};

use super::gate::Gate;
use super::outcome::{Comparison, Losses, Outcome};
use super::reference::{save, write_curve, write_forward};
use super::update::updates;
use super::{files, io, LevelError, Setup};
use crate::checkpoint;
use crate::parallel::Fault;
use crate::sharding::{ShardingPlan, Shards};
use crate::train::{self, Length, Record};

/// Run `level` of `mesh` and judge it against the reference artifacts in `reference`.
pub fn check(
    setup: &Setup<'_>,
    mesh: &MeshConfig,
    level: Level,
    limits: &Limits,
    reference: &Path,
    out: &Path,
) -> Result<Outcome, LevelError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    let start = Instant::now();
    let mut outcome = if level == Level::Roundtrip {
        roundtrip(setup, mesh, reference, out)?
    } else {
        let rec = train::mesh(
            setup.model,
            mesh,
            setup.training,
            length(setup, &[level]),
            None,
            setup.device,
            setup.burn_dtype(),
        )?;
        judge(setup, mesh, &rec, level, limits, reference, out)?
    };
    outcome.seconds = start.elapsed().as_secs_f64();
    Ok(outcome)
}

/// What one training run of a mesh, judged at several levels, found.
pub struct Judged {
    /// One outcome per level judged, in the order asked.
    pub outcomes: Vec<Outcome>,
    /// Sites a fault altered (empty without a fault).
    pub altered: Vec<String>,
}

/// Train `mesh` once (with `fault`, if any) and judge it at every level in `levels`, each in
/// its own directory under `out`. Roundtrip, which does not train, is judged from the seed
/// checkpoint when there is no fault (a training fault cannot show there).
pub fn levels(
    setup: &Setup<'_>,
    mesh: &MeshConfig,
    fault: Option<Fault>,
    levels: &[(Level, Limits)],
    reference: &Path,
    out: &Path,
) -> Result<Judged, LevelError> {
    let trained: Vec<Level> = levels
        .iter()
        .map(|(l, _)| *l)
        .filter(|l| *l != Level::Roundtrip && *l != Level::Routing)
        .collect();
    let rec = if trained.is_empty() {
        None
    } else {
        Some(train::mesh(
            setup.model,
            mesh,
            setup.training,
            length(setup, &trained),
            fault,
            setup.device,
            setup.burn_dtype(),
        )?)
    };
    let mut outcomes = Vec::new();
    for (level, limits) in levels {
        let dir = out.join(level.as_str());
        let start = Instant::now();
        let mut outcome = match (&rec, level) {
            (_, Level::Roundtrip) if fault.is_none() => {
                std::fs::create_dir_all(&dir).map_err(io(&dir))?;
                roundtrip(setup, mesh, reference, &dir)?
            }
            (Some(rec), l) if trained.contains(l) => {
                std::fs::create_dir_all(&dir).map_err(io(&dir))?;
                judge(setup, mesh, rec, *level, limits, reference, &dir)?
            }
            _ => continue,
        };
        outcome.seconds = start.elapsed().as_secs_f64();
        outcomes.push(outcome);
    }
    Ok(Judged {
        outcomes,
        altered: rec.map(|r| r.altered).unwrap_or_default(),
    })
}

/// Steps a mesh must train for these levels.
pub(crate) fn length(setup: &Setup<'_>, levels: &[Level]) -> Length {
    let t = setup.training;
    let mut len = Length {
        steps: 1,
        weights_after: 0,
    };
    for level in levels {
        match level {
            Level::Curve => len.steps = len.steps.max(t.steps as usize),
            Level::Oracle => {
                len.steps = len.steps.max(t.oracle_steps as usize);
                len.weights_after = t.oracle_steps as usize;
            }
            _ => {}
        }
    }
    len
}

fn tolerance_for(setup: &Setup<'_>, level: Level, limits: &Limits) -> Tolerance {
    Tolerance {
        profile: if limits.exact {
            Profile::Exact
        } else {
            Profile::Builtin {
                level,
                dtype: setup.dtype,
                limits: limits.clone(),
            }
        },
        ..Tolerance::default()
    }
}

fn tensors(
    what: &'static str,
    setup: &Setup<'_>,
    level: Level,
    limits: &Limits,
    a: &Path,
    b: &Path,
) -> Result<Comparison, LevelError> {
    let opts = TensorOptions {
        tolerance: tolerance_for(setup, level, limits),
        ..TensorOptions::default()
    };
    Ok(Comparison {
        reproduce: compare_command(a, b, limits, false),
        ..Comparison::tensors(what, &compare_checkpoints(a, b, &opts)?)
    })
}

/// The `meshparity compare` command that applies exactly `limits` to the two files.
pub(crate) fn compare_command(a: &Path, b: &Path, limits: &Limits, curve: bool) -> String {
    let mut cmd = format!(
        "meshparity compare {} {}",
        quote(&a.display().to_string()),
        quote(&b.display().to_string())
    );
    if limits.exact {
        cmd.push_str(" --profile exact");
        return cmd;
    }
    let settings: Vec<String> = limits
        .metrics
        .iter()
        .map(|(k, v)| format!("{k}={v:e}"))
        .collect();
    if curve {
        let mode = limits.mode.map_or("rel", |m| m.name());
        cmd.push_str(&format!(" --mode {mode}"));
    } else if let Some(l) = limits.layer_average {
        cmd.push_str(&format!(" --layer-average {l}"));
    }
    if !settings.is_empty() {
        cmd.push_str(&format!(" -t {}", settings.join(",")));
    }
    cmd
}

/// A shell word: as is when it is plain, else single-quoted.
fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./-=:,@+".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Merge per-rank tensors and save them; replicas that disagree are a failed comparison, not an
/// error.
fn merged(
    what: &'static str,
    plan: &ShardingPlan,
    ranks: &[Shards],
    out: &Path,
    file: &str,
) -> Result<Result<Shards, Comparison>, LevelError> {
    match plan.merge(ranks) {
        Ok(full) => {
            save(&out.join(file), &full)?;
            Ok(Ok(full))
        }
        Err(e) => Ok(Err(Comparison {
            what,
            reference: String::new(),
            candidate: format!("{} rank shards", ranks.len()),
            passed: false,
            compared: ranks.len() as u64,
            failure: Some(format!("merging rank shards: {e}")),
            reproduce: String::new(),
            gates: vec![Gate {
                scope: what.to_owned(),
                ..Gate::new(
                    format!("{} rank shards", ranks.len()),
                    "replicas_differ",
                    1.0,
                    0.0,
                )
            }],
            report: serde_json::Value::Null,
        })),
    }
}

/// Judge a finished run at one level.
pub(crate) fn judge(
    setup: &Setup<'_>,
    mesh: &MeshConfig,
    rec: &Record,
    level: Level,
    limits: &Limits,
    reference: &Path,
    out: &Path,
) -> Result<Outcome, LevelError> {
    let plan = ShardingPlan::llama(setup.model, mesh);
    let mut comparisons = Vec::new();
    let mut losses = None;
    match level {
        Level::Forward => {
            write_forward(out, rec)?;
            let (a, b) = (reference.join(files::FORWARD), out.join(files::FORWARD));
            comparisons.push(tensors("logits and loss", setup, level, limits, &a, &b)?);
        }
        Level::Curve => {
            let steps = (setup.training.steps as usize).min(rec.losses.len());
            write_curve(out, &rec.losses[..steps])?;
            let tol = tolerance_for(setup, level, limits);
            let opts = CurveOptions {
                step_key: "step".into(),
                limits: tolerance::curve_limits(&tol, limits.mode)?,
                baseline2: None,
                gate_performance: false,
            };
            let (a, b) = (reference.join(files::CURVE), out.join(files::CURVE));
            comparisons.push(Comparison {
                reproduce: compare_command(&a, &b, limits, true),
                ..Comparison::curve(&compare_curves(&a, &b, &opts)?)
            });
            let oracle = meshparity_compare::read_curve(&a)?;
            losses = Some(Losses {
                reference: oracle
                    .steps
                    .values()
                    .filter_map(|m| m.get("loss").copied())
                    .collect(),
                candidate: rec.losses[..steps].to_vec(),
            });
        }
        Level::Oracle => {
            match merged("gradients", &plan, &rec.grads, out, files::GRADS)? {
                Ok(_) => {
                    let (a, b) = (reference.join(files::GRADS), out.join(files::GRADS));
                    comparisons.push(tensors("gradients", setup, level, limits, &a, &b)?);
                }
                Err(failed) => comparisons.push(failed),
            }
            let weights = rec.weights.as_deref().unwrap_or_default();
            match merged("updates", &plan, weights, out, files::WEIGHTS)? {
                Ok(full) => {
                    let seed = checkpoint::load(&reference.join(files::SEED))?;
                    save(&out.join(files::UPDATES), &updates(&seed, &full))?;
                    let (a, b) = (reference.join(files::UPDATES), out.join(files::UPDATES));
                    comparisons.push(tensors("updates", setup, level, limits, &a, &b)?);
                }
                Err(failed) => comparisons.push(failed),
            }
        }
        Level::Roundtrip | Level::Routing => {
            return Err(LevelError::Unsupported(format!(
                "the {level} level for this family"
            )))
        }
    }
    if let Some(c) = comparisons.iter().find(|c| c.passed && c.gates.is_empty()) {
        return Err(LevelError::NothingGated(format!(
            "{level}: {} compared with no limit in force (the tolerance table gates no metric \
             these tensors provide)",
            c.what
        )));
    }
    Ok(Outcome {
        level,
        passed: comparisons.iter().all(|c| c.passed),
        comparisons,
        collectives: rec.collectives,
        altered: rec.altered.clone(),
        anomalies: rec.anomalies.clone(),
        losses,
        seconds: 0.0,
    })
}

/// Seed checkpoint → per-rank shard files → read back → merged; bit-identical to the seed.
fn roundtrip(
    setup: &Setup<'_>,
    mesh: &MeshConfig,
    reference: &Path,
    out: &Path,
) -> Result<Outcome, LevelError> {
    let plan = ShardingPlan::llama(setup.model, mesh);
    let seed_path = reference.join(files::SEED);
    let seed = checkpoint::load(&seed_path)?;
    let dir = out.join(files::SHARDS);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let mut back = Vec::new();
    for (rank, shards) in plan.shard(&seed).iter().enumerate() {
        let path = dir.join(format!("rank-{rank:05}.safetensors"));
        save(&path, shards)?;
        back.push(checkpoint::load(&path)?);
    }
    let comparison = match merged("checkpoint", &plan, &back, out, files::MERGED)? {
        Ok(_) => tensors(
            "checkpoint",
            setup,
            Level::Roundtrip,
            &Limits::exact(),
            &seed_path,
            &out.join(files::MERGED),
        )?,
        Err(failed) => failed,
    };
    Ok(Outcome {
        level: Level::Roundtrip,
        passed: comparison.passed,
        comparisons: vec![comparison],
        collectives: 0,
        altered: Vec::new(),
        anomalies: Vec::new(),
        losses: None,
        seconds: 0.0,
    })
}
