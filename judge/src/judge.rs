//! Judging a level from two artifact directories: the reference's and a mesh run's. This is
//! what a level *means*, the same for every engine; the comparison engine does the arithmetic
//! and every verdict names the `meshparity compare` command that re-derives it from the files
//! (weight updates are written only where they differ, so a passing one names none).

use std::path::{Path, PathBuf};

use meshparity_compare::{
    compare_checkpoints, compare_curves, read_curve, tolerance, CurveOptions, InputError, Profile,
    TensorOptions, Tolerance,
};
use meshparity_specs::{DType, Level, Limits, Training};

use crate::derived::{compare_derived, Side};
use crate::gate::Gate;
use crate::outcome::{Comparison, Losses, Outcome};
use crate::update::updates;
use crate::vacuity::vacuity;
use meshparity_engine::artifact::{files, Manifest};
use meshparity_engine::checkpoint;
use meshparity_engine::seal::verify_file;

pub use crate::compare_line::{compare_command, quote};

pub use crate::error::JudgeError;

/// The two runs a cell's levels are judged from.
pub struct Judge<'a> {
    pub dtype: DType,
    pub training: &'a Training,
    /// The reference's artifact directory.
    pub reference: &'a Path,
    /// The mesh run's artifact directory.
    pub run: &'a Path,
    /// Where the judge writes what it derives (weight updates); created if missing.
    pub out: &'a Path,
    /// A second run of the reference (a baseline variant's repeat): curves are then judged
    /// against the run-to-run envelope (noise-floor mode) instead of a fixed relative limit.
    pub baseline2: Option<&'a Path>,
}

impl Judge<'_> {
    /// Judge `level` under `limits`.
    pub fn level(&self, level: Level, limits: &Limits) -> Result<Outcome, JudgeError> {
        let start = std::time::Instant::now();
        let reference = Manifest::read(self.reference)?;
        let run = Manifest::read(self.run)?;
        std::fs::create_dir_all(self.out).map_err(|source| JudgeError::Io {
            path: self.out.display().to_string(),
            source,
        })?;
        let limits = if level == Level::Roundtrip {
            Limits::exact()
        } else {
            limits.clone()
        };
        let sides = Sides {
            judge: self,
            reference: &reference,
            run: &run,
            level,
            limits: &limits,
        };
        let (mut comparisons, losses) = sides.comparisons()?;
        if let Some(why) = vacuity(level, self.reference, &reference)? {
            comparisons.push(crate::vacuity::comparison(&why));
        }
        if let Some(c) = comparisons.iter().find(|c| c.passed && c.gates.is_empty()) {
            return Err(JudgeError::NothingGated(format!(
                "{level}: {} compared with no limit in force (the tolerance table gates no \
                 metric these tensors provide)",
                c.what
            )));
        }
        let trained = level != Level::Roundtrip;
        Ok(Outcome {
            level,
            passed: comparisons.iter().all(|c| c.passed),
            comparisons,
            collectives: if trained { run.collectives } else { 0 },
            altered: if trained {
                run.altered.clone()
            } else {
                Vec::new()
            },
            anomalies: if trained {
                run.anomalies.clone()
            } else {
                Vec::new()
            },
            losses,
            localization: None,
            localization_failed: None,
            repro: None,
            repro_in: None,
            seconds: start.elapsed().as_secs_f64(),
        })
    }
}

/// One level's view of the two runs.
struct Sides<'a> {
    judge: &'a Judge<'a>,
    reference: &'a Manifest,
    run: &'a Manifest,
    level: Level,
    limits: &'a Limits,
}

impl Sides<'_> {
    /// The level's comparisons, and the curve level's losses.
    fn comparisons(&self) -> Result<(Vec<Comparison>, Option<Losses>), JudgeError> {
        let resumed = self.run.artifacts.iter().any(|a| a == files::RESUME_SAVED);
        let comparisons = match self.level {
            // A resumed run's: the state its second mesh loaded against what its first saved.
            Level::Roundtrip if resumed => {
                vec![self.own("resumed state", files::RESUME_SAVED, files::CHECKPOINT)?]
            }
            Level::Roundtrip => {
                vec![self.tensors("checkpoint", files::SEED, files::CHECKPOINT)?]
            }
            Level::Forward => {
                let c = self.tensors("logits and loss", files::FORWARD, files::FORWARD)?;
                self.holds_logits(&c)?;
                let mut c = vec![c];
                c.extend(self.inputs(resumed)?);
                c
            }
            Level::Curve => {
                let (c, l) = self.curve()?;
                let mut c = vec![c];
                c.extend(self.inputs(resumed)?);
                return Ok((c, Some(l)));
            }
            Level::Oracle => {
                let mut c = vec![
                    self.tensors("gradients", files::GRADS, files::GRADS)?,
                    self.updates()?,
                ];
                // A resumed run's states at its checkpoint and after `oracle_steps`.
                if resumed {
                    self.states(&mut c)?;
                }
                if self.run.has(files::OPTIMIZER_STEP) {
                    c.push(self.optimizer_step()?);
                }
                c.extend(self.inputs(resumed)?);
                c
            }
            Level::Routing => vec![self.routing()?],
            Level::Trace => vec![self.sites()?],
        };
        Ok((comparisons, None))
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance {
            profile: if self.limits.exact {
                Profile::Exact
            } else {
                Profile::Builtin {
                    level: self.level,
                    dtype: self.judge.dtype,
                    limits: self.limits.clone(),
                }
            },
            ..Tolerance::default()
        }
    }

    /// The reference's `a` and the run's `b`, both required, and intact where their
    /// directories are sealed.
    fn paths(&self, a: &str, b: &str) -> Result<(PathBuf, PathBuf), JudgeError> {
        let level = self.level.as_str();
        self.reference.require(self.judge.reference, a, level)?;
        self.run.require(self.judge.run, b, level)?;
        verify_file(self.judge.reference, self.reference, a)?;
        verify_file(self.judge.run, self.run, b)?;
        Ok((self.judge.reference.join(a), self.judge.run.join(b)))
    }

    fn tensors(&self, what: &str, a: &str, b: &str) -> Result<Comparison, JudgeError> {
        if let Some(why) = self.run.unmerged.get(b) {
            return Ok(unmerged(what, self.run.world_size, why));
        }
        let (a, b) = self.paths(a, b)?;
        self.compare(what, &a, &b)
    }

    /// Two files of the run itself, `a` as the expected side.
    fn own(&self, what: &str, a: &str, b: &str) -> Result<Comparison, JudgeError> {
        for file in [a, b] {
            if let Some(why) = self.run.unmerged.get(file) {
                return Ok(unmerged(what, self.run.world_size, why));
            }
            self.run
                .require(self.judge.run, file, self.level.as_str())?;
            verify_file(self.judge.run, self.run, file)?;
        }
        self.compare(what, &self.judge.run.join(a), &self.judge.run.join(b))
    }

    fn compare(&self, what: &str, a: &Path, b: &Path) -> Result<Comparison, JudgeError> {
        let opts = TensorOptions {
            tolerance: self.tolerance(),
            ..TensorOptions::default()
        };
        Ok(Comparison {
            reproduce: compare_command(a, b, self.limits, false),
            ..Comparison::tensors(what, &compare_checkpoints(a, b, &opts)?)
        })
    }

    /// The forward level's floor: the reference holds logits with elements, and so the run was
    /// judged on them (a run's logits of another shape are a failed comparison, not too
    /// little). A file of only other tensors (or of empty ones) agreed with its reference and
    /// passed.
    fn holds_logits(&self, c: &Comparison) -> Result<(), JudgeError> {
        if c.report.is_null() {
            return Ok(()); // unmerged rank shards: already a failure
        }
        let path = self.judge.reference.join(files::FORWARD);
        let reference = meshparity_compare::Checkpoint::open(&path)?;
        let logits = reference.view("logits").map(|v| v.len());
        let why = match logits {
            None => format!(
                "`{}` compared no tensor named `logits` (the artifact contract names the \
                 first step's logits `logits`, with the loss as `loss`)",
                files::FORWARD
            ),
            Some(0) => format!("`logits` in `{}` has no elements", files::FORWARD),
            Some(_) => return Ok(()),
        };
        Err(JudgeError::TooLittle {
            level: self.level,
            why,
        })
    }

    /// The curve level's floor: each side logged every step the run trains (`steps`), so a
    /// curve cut short on both sides is not a pass.
    fn holds_every_step(&self, a: &Path, b: &Path) -> Result<(), JudgeError> {
        let steps = self.judge.training.steps as usize;
        for (side, path) in [("the reference", a), ("the run", b)] {
            let logged = read_curve(path)?.steps.len();
            if logged < steps {
                return Err(JudgeError::TooLittle {
                    level: self.level,
                    why: format!(
                        "{side}'s curve `{}` logs {logged} step(s) of the {steps} it trains",
                        path.display()
                    ),
                });
            }
        }
        Ok(())
    }

    /// The trace level: each traced site against its own bound ([`crate::sites`]).
    fn sites(&self) -> Result<Comparison, JudgeError> {
        self.paths(files::TRACE_INDEX, files::TRACE_INDEX)?;
        self.paths(files::TRACE, files::TRACE)?;
        let (dtype, limits) = (self.judge.dtype, self.limits);
        Ok(crate::sites::judge(
            self.judge.reference,
            self.judge.run,
            dtype,
            limits,
        )?)
    }

    fn routing(&self) -> Result<Comparison, JudgeError> {
        let (a, b) = self.paths(files::ROUTING, files::ROUTING)?;
        let tie = crate::routing::tie_margin(self.judge.dtype);
        let report = crate::routing::compare(&a, &b, tie)?;
        Ok(report.comparison(self.limits, &a, &b))
    }

    fn curve(&self) -> Result<(Comparison, Losses), JudgeError> {
        let (a, b) = self.paths(files::CURVE, files::CURVE)?;
        self.holds_every_step(&a, &b)?;
        if let Some(d) = self.judge.baseline2 {
            verify_file(d, &Manifest::read(d)?, files::CURVE)?;
        }
        let baseline2 = self.judge.baseline2.map(|d| d.join(files::CURVE));
        let mode = match &baseline2 {
            Some(_) if !self.limits.exact => Some(meshparity_specs::CurveMode::NoiseFloor),
            _ => self.limits.mode,
        };
        let opts = CurveOptions {
            step_key: "step".into(),
            limits: tolerance::curve_limits(&self.tolerance(), mode)?,
            baseline2,
            gate_performance: false,
        };
        let mut reproduce = compare_command(&a, &b, self.limits, true);
        if let (Some(b2), Some(meshparity_specs::CurveMode::NoiseFloor)) = (&opts.baseline2, mode) {
            reproduce = reproduce.replacen(" --mode rel", "", 1);
            reproduce.push_str(&format!(
                " --mode noise-floor --baseline2 {}",
                quote(&b2.display().to_string())
            ));
        }
        let mut comparison = Comparison {
            reproduce,
            ..Comparison::curve(&compare_curves(&a, &b, &opts)?)
        };
        let mut ungated: Vec<&String> = self.reference.ungated.iter().collect();
        for m in &self.run.ungated {
            if !ungated.contains(&m) {
                ungated.push(m);
            }
        }
        if !ungated.is_empty() {
            let mut list: Vec<String> = ungated.iter().take(20).map(|m| format!("`{m}`")).collect();
            if ungated.len() > 20 {
                list.push(format!("and {} more", ungated.len() - 20));
            }
            comparison.notes.push(format!(
                "the program's curve logs metric(s) neither gated nor a performance figure, not \
                 compared: {}; list them in the engine's artifacts.gate to gate them",
                list.join(", ")
            ));
        }
        let losses = |p: &Path| -> Result<Vec<f64>, InputError> {
            Ok(read_curve(p)?
                .steps
                .values()
                .filter_map(|m| m.get("loss").copied())
                .collect())
        };
        Ok((
            comparison,
            Losses {
                reference: losses(&a)?,
                candidate: losses(&b)?,
            },
        ))
    }

    /// The rows each rank trained on against the reference's ([`crate::inputs`]), on the
    /// levels that train (forward, curve and oracle: a mutation's staged check may stop at any;
    /// logits computed from other rows are named as such), where both recorded them: a run that recorded none is judged without (an engine or program that
    /// does not record its inputs), a reference without them while the run has them is too
    /// little.
    fn inputs(&self, resumed: bool) -> Result<Option<Comparison>, JudgeError> {
        if !self.run.has(files::INPUTS) {
            return Ok(None);
        }
        let (a, b) = self.paths(files::INPUTS, files::INPUTS)?;
        let at = resumed
            .then_some(self.judge.training.resume.as_ref())
            .flatten();
        let at = at.map(|r| r.at as u64);
        crate::inputs::judge(&a, &b, at, self.level).map(Some)
    }

    /// A resumed run's whole state, at its checkpoint and after `oracle_steps`, against the
    /// reference's at the same steps ([`crate::resumed`]). A run or reference that kept no
    /// state there (a command engine's program whose templates do not ask for it) is said in a
    /// note on `c`'s last comparison, never passed silently.
    fn states(&self, c: &mut Vec<Comparison>) -> Result<(), JudgeError> {
        let t = self.judge.training;
        let Some(at) = t.resume.as_ref().map(|r| r.at) else {
            return Ok(());
        };
        let pairs = [
            (
                format!("state at the checkpoint (step {at})"),
                at,
                files::RESUME_SAVED.to_owned(),
            ),
            (
                format!("state after step {}", t.oracle_steps),
                t.oracle_steps,
                files::state_at(t.oracle_steps),
            ),
        ];
        for (what, step, mine) in pairs {
            let theirs = files::state_at(step);
            if let Some(why) = self.run.unmerged.get(&mine) {
                c.push(unmerged(&what, self.run.world_size, why));
                continue;
            }
            if !self.reference.has(&theirs)
                || !self.run.has(&mine)
                || !self.reference.has(files::SEED)
            {
                let note = format!(
                    "{what}: not judged, the reference or the run kept no state there (a \
                     program writes it where its templates name {{{{state_dir}}}}, docs/engines.md)"
                );
                if let Some(last) = c.last_mut() {
                    last.notes.push(note);
                }
                continue;
            }
            let (reference, run) = self.paths(&theirs, &mine)?;
            verify_file(self.judge.reference, self.reference, files::SEED)?;
            let states = crate::resumed::States {
                what,
                reference: &reference,
                run: &run,
                seed: &self.judge.reference.join(files::SEED),
                out: self.judge.out,
                tag: format!("state-at-step{step}"),
            };
            c.extend(crate::resumed::judge(
                &states,
                self.tolerance(),
                self.limits,
            )?);
        }
        Ok(())
    }

    /// The run's last oracle step replayed with world size 1's optimizer
    /// ([`crate::optimizer_step`]): the run's own file, no reference side.
    fn optimizer_step(&self) -> Result<Comparison, JudgeError> {
        let what = crate::optimizer_step::WHAT;
        let file = files::OPTIMIZER_STEP;
        if let Some(why) = self.run.unmerged.get(file) {
            return Ok(unmerged(what, self.run.world_size, why));
        }
        if let Some(why) = self.run.unmerged.get(files::WEIGHTS) {
            return Ok(unmerged(what, self.run.world_size, why));
        }
        for f in [file, files::WEIGHTS] {
            self.run.require(self.judge.run, f, self.level.as_str())?;
            verify_file(self.judge.run, self.run, f)?;
        }
        let path = self.judge.run.join(file);
        let replayed = crate::optimizer_step::replay(
            &path,
            &self.judge.run.join(files::WEIGHTS),
            self.judge.training,
            self.judge.dtype,
        )?;
        let shown = path.display().to_string();
        Ok(Comparison::replayed(self.judge.training, &shown, &replayed))
    }

    /// Weight updates (weights after k steps − seed) of both runs ([`crate::derived`]). A
    /// reference without a seed checkpoint (a program that writes no initial weights) has its
    /// final weights compared instead.
    fn updates(&self) -> Result<Comparison, JudgeError> {
        if let Some(why) = self.run.unmerged.get(files::WEIGHTS) {
            return Ok(unmerged("updates", self.run.world_size, why));
        }
        let (reference, run) = self.paths(files::WEIGHTS, files::WEIGHTS)?;
        if !self.reference.has(files::SEED) {
            return self.compare("weights", &reference, &run);
        }
        verify_file(self.judge.reference, self.reference, files::SEED)?;
        let seed = checkpoint::load(&self.judge.reference.join(files::SEED))?;
        let side = |from: &Path, name: &str| -> Result<Side, JudgeError> {
            Ok(Side {
                tensors: updates(&seed, &checkpoint::load(from)?),
                path: self.judge.out.join(name),
            })
        };
        let sides = [
            side(&reference, files::REFERENCE_UPDATES)?,
            side(&run, files::UPDATES)?,
        ];
        compare_derived("updates", sides, self.tolerance(), self.limits)
    }
}

/// Rank shards that could not be merged: a failed comparison, not an error.
fn unmerged(what: &str, world_size: u64, why: &str) -> Comparison {
    let shards = format!("{world_size} rank shards");
    let gate = if why.contains(meshparity_engine::artifact::PADDING_TRAINED) {
        "padding_trained"
    } else {
        "replicas_differ"
    };
    Comparison {
        what: what.to_owned(),
        reference: String::new(),
        candidate: shards.clone(),
        passed: false,
        compared: world_size,
        failure: Some(format!("merging rank shards: {why}")),
        reproduce: String::new(),
        gates: vec![Gate {
            scope: what.to_owned(),
            ..Gate::new(shards, gate, 1.0, 0.0)
        }],
        report: serde_json::Value::Null,
        notes: Vec::new(),
        unkept: false,
    }
}
