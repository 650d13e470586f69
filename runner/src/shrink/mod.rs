//! Shrink (`run --shrink`): the smallest configuration that still fails the same level — fewer
//! layers, smaller widths, sequence, batch and step counts, lower parallel degrees (tp4 → tp2, a
//! 3-D mesh → the one axis that fails alone), f32 instead of bf16 — found greedily within a time
//! budget, and written as a spec that reproduces it in seconds. The fuzzing of Megatron-LM
//! (NVIDIA/Megatron-LM#7452) reported each bug this way: a 2-rank CPU reproduction.
//!
//! - `case.rs` — what one failing job trains, and how a repro describes it;
//! - `candidates.rs` — one step smaller along each axis of a case;
//! - `spec.rs` — a case as the spec file that plans exactly its job;
//! - `floors.rs`, `engine.rs` — a command engine's: what it lets shrink, and its table in the
//!   repro spec;
//! - `policy.rs` — which failing jobs shrink (by default the first of each kind);
//! - `no_repro.rs` — why a failure gets no repro spec.

mod candidates;
mod case;
mod engine;
mod floors;
pub mod no_repro;
pub mod policy;
pub mod spec;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use meshparity_engine::{Engine, RunRequest};
pub use meshparity_judge::Repro;
use meshparity_judge::{check, ReferenceTrace};

pub use case::{mesh_name, Case};
use meshparity_specs::tolerance::BUILTIN;
use meshparity_specs::{catalog, Level, Limits, MeshConfig};
use no_repro::NoRepro;

/// What is shrunk, and how it must keep failing.
pub struct Target<'a> {
    pub engine: &'a dyn Engine,
    pub level: Level,
    pub mutation: Option<&'a str>,
    /// The limits the job failed (a failed check judged by its spec's own table): written into
    /// the repro spec as its table for the job's dtype, so the repro judges as the job did.
    /// `None`: the built-in table's (a mutation is caught by it).
    pub limits: Option<&'a Limits>,
    /// The site where the original run first left the reference: a smaller case must leave it
    /// there too (`None`: not localized, the level alone decides).
    pub site: Option<&'a str>,
    /// Scratch space for the tries; emptied as they are judged.
    pub scratch: &'a Path,
    pub budget: Duration,
    /// A command engine's definition, and its table as the repro spec writes it (`None`: the
    /// built-in engine).
    pub command: Option<Command<'a>>,
}

/// A command engine to shrink on.
pub struct Command<'a> {
    pub def: &'a meshparity_specs::EngineDef,
    pub table: String,
}

impl<'a> Target<'a> {
    /// `[engines.NAME]` for a command engine's repro spec that injects `mutation` (if any).
    pub fn command_engine(
        def: &'a meshparity_specs::EngineDef,
        mutation: Option<&str>,
    ) -> Result<Command<'a>, NoRepro> {
        if def.shrink.is_none() {
            return Err(NoRepro::NothingShrinks(def.name.value.clone()));
        }
        Ok(Command {
            def,
            table: engine::table(def, mutation)?,
        })
    }

    fn spec_text(&self, case: &Case, mesh: &str) -> String {
        let tolerance = self.limits.map(|l| (l, case.dtype));
        let engine = self.command.as_ref().map(|c| c.table.as_str());
        // A command engine's bug is selected by its table (above), not by the catalog's list.
        let catalogued = self.mutation.filter(|_| engine.is_none());
        spec::spec(case, mesh, self.level, catalogued, tolerance, engine)
    }
}

impl Target<'_> {
    /// Whether `case` still fails the level (a mutation: is still caught there), and one
    /// run's seconds.
    fn fails(&self, refs: &References, case: &Case, n: usize) -> Option<f64> {
        let mesh = mesh_name(&case.mesh);
        let text = self.spec_text(case, &mesh);
        let path = self.scratch.join("candidate.toml");
        // Judged by the limits its repro spec will have: the built-in table's.
        let loaded = meshparity_specs::load::load_text(&path, text, &meshparity_specs::load::Disk);
        // The job's own case must load as a spec: if it does not, no repro can be written, and
        // the job's stderr says why.
        let loaded = loaded
            .map_err(|e| {
                if n == 0 {
                    eprintln!("no repro: the job's case does not load as a spec: {e}");
                }
            })
            .ok()?;
        let table = if self.limits.is_some() {
            spec::TOLERANCE
        } else {
            BUILTIN
        };
        let (_, limits) = loaded.spec.limits(table, self.level, case.dtype)?;
        let limits = limits.clone();
        // The repro must be what is judged: a case the spec text does not carry whole (a key
        // the writer does not know) is no repro.
        if !describes(&loaded.spec, case, &mesh) || !plans(&loaded.spec, self.level, self.mutation)
        {
            return None;
        }
        if let Some(m) = self.mutation.and_then(catalog::find) {
            if !m.applies_to(&case.model, &case.mesh, &case.training) {
                return None;
            }
        }
        let dir = self.scratch.join(format!("try{n}"));
        let start = Instant::now();
        let failed = self.judge(refs, case, &limits, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        failed.then(|| start.elapsed().as_secs_f64())
    }

    fn judge(&self, refs: &References, case: &Case, limits: &Limits, dir: &Path) -> bool {
        let req = RunRequest {
            model: &case.model,
            training: &case.training,
            dtype: case.dtype,
            mesh: None,
            levels: &[],
            mutation: None,
            reference: None,
            out: dir,
            trace: false,
        };
        let Some((reference, trace)) = refs.of(self.engine, &req, &self.scratch.join("references"))
        else {
            return false;
        };
        let levels = [self.level];
        let req = RunRequest {
            mesh: Some(&case.mesh),
            levels: &levels,
            mutation: self.mutation,
            reference: Some(&reference),
            out: &dir.join("run"),
            ..req
        };
        let judged = check(
            self.engine,
            &req,
            &[(self.level, limits.clone())],
            &reference,
            dir,
        );
        let Ok(judged) = judged else {
            return false;
        };
        let outcome = judged.outcomes.iter().find(|o| o.level == self.level);
        let failed = outcome.is_some_and(|o| !o.passed);
        let Some(site) = self.site.filter(|_| failed) else {
            return failed;
        };
        // The same bug, not another one the smaller shapes expose: it leaves the reference
        // first at the same site (checkpoint bugs have no trace; the level decides).
        if site == "checkpoint" {
            return true;
        }
        let req = RunRequest {
            out: &dir.join("trace-run"),
            ..req
        };
        let found = trace.localize(self.engine, &req, &dir.join("trace-run"));
        let found = found.map(|l| l.map(|l| l.or_gate(outcome)));
        matches!(found, Ok(Some(l)) if l.first.as_ref().is_some_and(|f| f.site == site))
    }
}

/// Whether `spec`, as loaded, plans exactly `case`: its one model, mesh, training and dtype.
fn describes(spec: &meshparity_specs::Spec, case: &Case, mesh: &str) -> bool {
    let model = spec.models.get(spec::MODEL).map(|m| m.config());
    let dtype = spec.run.dtype.value;
    model.as_ref() == Some(&case.model)
        && spec.meshes.get(mesh).map(|m| m.config()) == Some(case.mesh)
        && spec.run.training == case.training
        && dtype == case.dtype
}

/// Whether `spec` plans the job a repro must run: the mutation's job (a command engine's bug
/// whose `needs` the smaller mesh lacks plans none), or the level's check.
fn plans(spec: &meshparity_specs::Spec, level: Level, mutation: Option<&str>) -> bool {
    let plan = crate::plan::Plan::build(spec);
    plan.graph
        .node_weights()
        .any(|j| match (&j.kind, mutation) {
            (crate::plan::JobKind::Mutation { mutation: m, .. }, Some(want)) => m == want,
            (crate::plan::JobKind::Check { level: l }, None) => *l == level,
            _ => false,
        })
}

/// The search's result: the smallest case, and its counts.
pub struct Shrunk {
    pub case: Case,
    pub tried: usize,
    pub steps: usize,
    pub seconds: f64,
    pub run_seconds: f64,
}

/// Shrink `case` greedily: take the first smaller candidate that still fails, until none does
/// or the budget is spent. `None` when `case` itself does not fail as asked.
pub fn shrink(t: &Target<'_>, case: Case) -> Option<Shrunk> {
    // Scratch: each try's files are judged and removed within a second; the process's switch
    // is put back when the search ends.
    let synced = meshparity_engine::checkpoint::sync_to_disk(false);
    let found = search(t, case);
    let _ = std::fs::remove_dir_all(t.scratch.join("references"));
    meshparity_engine::checkpoint::sync_to_disk(synced);
    found
}

/// The world-size-1 references of one search and their traces, by what they depend on (model,
/// training, dtype): a candidate that only lowers a mesh degree, or drops the mesh's ZeRO
/// stage, is judged against the reference (and its trace) that an earlier try made.
#[derive(Default)]
struct References {
    made: RefCell<Vec<(Case, PathBuf, Rc<ReferenceTrace>)>>,
}

impl References {
    /// `req`'s reference (its `out` ignored) and its trace, made under `root` on first use;
    /// `None` where the engine could not make it.
    fn of(
        &self,
        engine: &dyn Engine,
        req: &RunRequest<'_>,
        root: &Path,
    ) -> Option<(PathBuf, Rc<ReferenceTrace>)> {
        let key = Case {
            model: req.model.clone(),
            mesh: MeshConfig::SINGLE,
            training: req.training.clone(),
            dtype: req.dtype,
        };
        let mut made = self.made.borrow_mut();
        if let Some((_, dir, trace)) = made.iter().find(|(k, _, _)| *k == key) {
            return Some((dir.clone(), trace.clone()));
        }
        let dir = root.join(format!("{}", made.len()));
        let reference = dir.join("reference");
        let req = RunRequest {
            out: &reference,
            ..*req
        };
        engine.reference(&req).ok()?;
        let trace = Rc::new(ReferenceTrace::new(dir.join("trace")));
        made.push((key, reference.clone(), trace.clone()));
        Some((reference, trace))
    }
}

/// Greedy, resuming where the last step was taken: after a smaller candidate is kept, the
/// next pass starts at the same place in the new case's list (the same axis, which often halves
/// again) and wraps around, and the search ends after a whole pass keeps nothing — a local
/// minimum, as restarting from the top gave, without retrying every earlier axis after each
/// step (the quickstart's searches tried 118–182 candidates each that way).
fn search(t: &Target<'_>, case: Case) -> Option<Shrunk> {
    let start = Instant::now();
    let refs = References::default();
    let mut tried = 1;
    let mut run_seconds = t.fails(&refs, &case, 0)?;
    let (mut current, mut steps, mut from) = (case, 0, 0);
    let floors = t.command.as_ref().map(|c| c.def.shrink.as_ref());
    'search: while start.elapsed() < t.budget {
        let list = candidates::smaller(&current);
        let n = list.len();
        for k in 0..n {
            if start.elapsed() >= t.budget {
                break 'search;
            }
            let i = (from + k) % n;
            let candidate = &list[i];
            if let Some(floors) = floors {
                if !floors::allows(floors, &current, candidate) {
                    continue;
                }
            }
            tried += 1;
            if let Some(s) = t.fails(&refs, candidate, tried) {
                current = candidate.clone();
                run_seconds = s;
                steps += 1;
                from = i;
                continue 'search;
            }
        }
        break;
    }
    Some(Shrunk {
        case: current,
        tried,
        steps,
        seconds: start.elapsed().as_secs_f64(),
        run_seconds,
    })
}

/// Write `shrunk`'s spec into `dir` (`spec.toml`, and `command`: the line that runs it) and
/// describe it for the job's report.
pub fn write(dir: &Path, shrunk: &Shrunk, t: &Target<'_>) -> std::io::Result<Repro> {
    let level = t.level;
    std::fs::create_dir_all(dir)?;
    let mesh = mesh_name(&shrunk.case.mesh);
    let path: PathBuf = dir.join("spec.toml");
    std::fs::write(&path, t.spec_text(&shrunk.case, &mesh))?;
    // Absolute, so it runs from anywhere; quoted, so pasted into a shell the path stays a
    // path whatever it holds.
    let absolute = path.canonicalize()?;
    let command = format!(
        "meshparity run {}",
        meshparity_judge::judge::quote(&absolute.display().to_string())
    );
    std::fs::write(dir.join("command"), format!("{command}\n"))?;
    Ok(Repro {
        smallest: match &t.command {
            Some(c) => shrunk.case.describe_seen(|v| c.def.names(v)),
            None => shrunk.case.describe(),
        },
        level,
        spec: path.display().to_string(),
        command,
        tried: shrunk.tried,
        steps: shrunk.steps,
        seconds: shrunk.seconds,
        run_seconds: shrunk.run_seconds,
    })
}
