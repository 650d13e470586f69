//! Running the units over seeds and configurations, in this process and in parallel: one work
//! item is a (model, dtype)'s units of every configuration on one seed — per unit, a reference
//! run and every mesh and mutation judged against it, in a scratch directory removed
//! afterwards.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use meshparity_engine::{Engine, RunRequest};
use meshparity_judge::{
    check, check_until_caught_sharing, FirstStages, Gate, Outcome, ReferenceTrace,
};
use meshparity_specs::{DType, Level, ModelConfig, Spec};
use rayon::prelude::*;

use super::units::{MeshUnit, Unit};
use super::Options;
use crate::engines::Engines;

/// One mesh run (correct, or with one mutation) on one seed, judged at its levels.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Index into the sweep's configurations.
    pub config: usize,
    pub seed: u64,
    pub model: String,
    pub dtype: DType,
    pub mesh: String,
    pub mutation: Option<String>,
    pub levels: Vec<LevelSample>,
    /// For a mutation: whether the fault altered any site at all.
    pub injected: bool,
    /// The run could not be judged (unsupported mesh, I/O): never counted as a pass.
    pub error: Option<String>,
    /// For a mutation: the first diverging site, and whether it is the catalog's.
    pub site: Option<String>,
    pub as_injected: Option<bool>,
}

#[derive(Clone, Debug)]
pub struct LevelSample {
    pub level: Level,
    pub passed: bool,
    pub gates: Vec<Gate>,
}

impl LevelSample {
    fn of(o: &Outcome) -> Self {
        Self {
            level: o.level,
            passed: o.passed,
            gates: o.comparisons.iter().flat_map(|c| c.gates.clone()).collect(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("creating scratch directory {path}: {source}")]
    Scratch {
        path: String,
        source: std::io::Error,
    },
    #[error("starting {threads} sweep thread(s): {why}")]
    Pool { threads: usize, why: String },
}

/// Run every (configuration, unit, seed). `units[c]` are configuration `c`'s units;
/// `progress(done, total)` is called as items finish.
pub fn sweep(
    spec: &Spec,
    units: &[Vec<Unit>],
    opts: &Options,
    engines: &dyn Engines,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<Sample>, SweepError> {
    std::fs::create_dir_all(&opts.scratch).map_err(|source| SweepError::Scratch {
        path: opts.scratch.display().to_string(),
        source,
    })?;
    // Scratch: every run's files are judged and removed within a second. The switch is the
    // process's; it is put back when the sweep ends.
    let synced = meshparity_engine::checkpoint::sync_to_disk(false);
    // One work item: a (model, dtype)'s units of every configuration, on one seed, run one
    // after the other so that they share the mutation runs' forward-only first stages.
    let mut groups: Vec<((&str, DType), Vec<Member>)> = Vec::new();
    for (c, us) in units.iter().enumerate() {
        for (u, unit) in us.iter().enumerate() {
            let key = (unit.model.as_str(), unit.dtype);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, g)) => g.push((c, u, unit)),
                None => groups.push((key, vec![(c, u, unit)])),
            }
        }
    }
    let last = opts.first_seed.saturating_add(opts.seeds);
    let items: Vec<(&[Member], u64)> = groups
        .iter()
        .flat_map(|(_, g)| (opts.first_seed..last).map(move |seed| (g.as_slice(), seed)))
        .collect();
    let done = AtomicUsize::new(0);
    let total = items.len();
    // Items at once: the slots over the heaviest item's weight, so programs never run more
    // ranks at once than there are slots. (A pool of that many threads, not a semaphore: a
    // rayon thread blocked on one while it held another item's stack deadlocked.)
    let heaviest = groups.iter().map(|(_, g)| weight(g)).max().unwrap_or(1);
    let threads = (opts.slots.max(1) / heaviest).max(1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| SweepError::Pool {
            threads,
            why: e.to_string(),
        })?;
    let samples = pool.install(|| {
        items
            .par_iter()
            .flat_map_iter(|&(group, seed)| {
                let what = Runs {
                    mutations: opts
                        .mutation_seeds
                        .is_none_or(|n| seed - opts.first_seed < n),
                    localize: opts.localize,
                    first_catch: opts.first_catch,
                };
                let mut shared = FirstStages::default();
                let mut out = Vec::new();
                for &(c, u, unit) in group {
                    let dir = opts.scratch.join(format!("c{c}-u{u}-s{seed}"));
                    out.extend(run_unit(
                        spec,
                        engines,
                        (c, what),
                        unit,
                        seed,
                        &dir,
                        &mut shared,
                    ));
                    let _ = std::fs::remove_dir_all(&dir);
                }
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                out
            })
            .collect()
    });
    meshparity_engine::checkpoint::sync_to_disk(synced);
    Ok(samples)
}

/// A unit of one configuration in a work item: (configuration index, unit index, unit).
type Member<'a> = (usize, usize, &'a Unit);

impl Sample {
    /// Run `mutation` (`None`: the correct mesh) of `unit` on `mesh`, not judged yet.
    fn blank(
        config: usize,
        seed: u64,
        unit: &Unit,
        mesh: &MeshUnit,
        mutation: Option<&str>,
    ) -> Sample {
        Sample {
            config,
            seed,
            model: unit.model.clone(),
            dtype: unit.dtype,
            mesh: mesh.name.clone(),
            mutation: mutation.map(str::to_owned),
            levels: Vec::new(),
            injected: false,
            error: None,
            site: None,
            as_injected: None,
        }
    }
}

/// The CPU slots a work item takes: a user's program's ranks are processes of their own, one
/// slot each (its widest mesh's); the built-in engine's ranks share the pool's threads.
fn weight(group: &[Member]) -> usize {
    group
        .iter()
        .filter(|(_, _, u)| u.model_config.engine.is_some())
        .flat_map(|(_, _, u)| u.meshes.iter().map(|m| m.config.world_size() as usize))
        .max()
        .unwrap_or(1)
}

/// What one unit's seed runs besides the correct meshes.
#[derive(Clone, Copy)]
struct Runs {
    mutations: bool,
    localize: bool,
    first_catch: bool,
}

fn run_unit(
    spec: &Spec,
    engines: &dyn Engines,
    (config, what): (usize, Runs),
    unit: &Unit,
    seed: u64,
    dir: &Path,
    shared: &mut FirstStages,
) -> Vec<Sample> {
    let mut training = unit.training.clone();
    training.seed = seed;
    let sample =
        |mesh: &MeshUnit, mutation: Option<&str>| Sample::blank(config, seed, unit, mesh, mutation);
    // Every run of the unit, failed with `error` (its engine or reference could not be had).
    let every = |error: String| -> Vec<Sample> {
        let mut out = Vec::new();
        for m in &unit.meshes {
            for mutation in std::iter::once(None).chain(mutations_of(m, what).map(Some)) {
                out.push(Sample {
                    error: Some(error.clone()),
                    ..sample(m, mutation)
                });
            }
        }
        out
    };
    let (engine, oracle, reference_config) = match open_engines(spec, engines, unit, dir) {
        Ok(opened) => opened,
        Err(e) => return every(e.to_string()),
    };
    let reference = dir.join("reference");
    let req = RunRequest {
        model: &reference_config,
        training: &training,
        dtype: unit.dtype,
        mesh: None,
        levels: &[],
        mutation: None,
        reference: None,
        out: &reference,
        trace: false,
    };
    if let Err(e) = oracle.as_deref().unwrap_or(engine.as_ref()).reference(&req) {
        return every(format!("reference: {e}"));
    }
    // The reference's own trace where it wrote one (the built-in engine does, for the trace
    // level); else traced on the first localization that needs it.
    let traced = if reference
        .join(meshparity_engine::files::TRACE_INDEX)
        .is_file()
    {
        ReferenceTrace::made(reference.clone())
    } else {
        ReferenceTrace::new(dir.join("reference-trace"))
    };
    let mut out = Vec::new();
    for mesh in &unit.meshes {
        let on_mesh = mesh.training(&training);
        let runs = std::iter::once(None).chain(mutations_of(mesh, what).map(Some));
        let levels: Vec<Level> = mesh.levels.iter().map(|(l, _)| *l).collect();
        for mutation in runs {
            let name = mutation.unwrap_or("correct");
            let here = dir.join(&mesh.name).join(name);
            let run = here.join("run");
            let req = RunRequest {
                model: &unit.model_config,
                training: &on_mesh,
                mesh: Some(&mesh.config),
                levels: &levels,
                mutation,
                reference: Some(&reference),
                out: &run,
                // A mutation run to be localized traces as it trains, and is localized from it.
                trace: mutation.is_some() && what.localize,
                ..req
            };
            let mut s = sample(mesh, mutation);
            let on = Judged {
                engine: engine.as_ref(),
                mesh,
                reference: &reference,
                here: &here,
                traced: &traced,
            };
            on.judge(&req, what, shared, &mut s);
            // Judged: its artifacts and traces go now, so scratch holds one run at a time.
            let _ = std::fs::remove_dir_all(&here);
            out.push(s);
        }
    }
    out
}

/// Where one run of a unit's mesh is judged.
struct Judged<'a> {
    engine: &'a dyn Engine,
    mesh: &'a MeshUnit,
    reference: &'a Path,
    here: &'a Path,
    traced: &'a ReferenceTrace,
}

impl Judged<'_> {
    /// Run `req` and judge it into `s`: a mutation run stops at its first catch (where `what`
    /// says so) and is localized where asked; a correct run is judged at every level.
    fn judge(&self, req: &RunRequest<'_>, what: Runs, shared: &mut FirstStages, s: &mut Sample) {
        let judged = match req.mutation {
            Some(_) if what.first_catch => check_until_caught_sharing(
                self.engine,
                req,
                &self.mesh.levels,
                self.reference,
                self.here,
                shared,
            ),
            _ => check(
                self.engine,
                req,
                &self.mesh.levels,
                self.reference,
                self.here,
            ),
        };
        let c = match judged {
            Ok(c) => c,
            Err(e) => {
                s.error = Some(e.to_string());
                return;
            }
        };
        s.levels = c.outcomes.iter().map(LevelSample::of).collect();
        // In the order a mutation job's stages judge them (shortest run first), so the first
        // failing level is the one `run` reports as catching the bug.
        s.levels.sort_by_key(|l| {
            let length = RunRequest {
                levels: &[l.level],
                ..*req
            }
            .length();
            (length.steps, l.level)
        });
        s.injected = !c.manifest.altered.is_empty();
        if let Some(m) = req.mutation.filter(|_| what.localize) {
            let mut o = c.mutation(m);
            let trace = self.here.join("trace");
            match locate_mutation(self.engine, req, &o, self.traced, &trace) {
                Ok(Some(l)) => o.localized(l, self.engine),
                Ok(None) => {}
                Err(e) => s.error = Some(format!("localizing: {e}")),
            }
            s.site = o.localization.and_then(|l| l.first).map(|f| f.site);
            s.as_injected = o.localized_as_injected;
        }
    }
}

/// A unit's engine, its reference's where that is another (`reference = "NAME"`), and the
/// reference's model.
type Opened = (Box<dyn Engine>, Option<Box<dyn Engine>>, ModelConfig);

/// The engines and reference model of `unit`.
fn open_engines(
    spec: &Spec,
    engines: &dyn Engines,
    unit: &Unit,
    dir: &Path,
) -> Result<Opened, crate::engines::OpenError> {
    let target = crate::engines::Target {
        spec: Some(spec),
        model: &unit.model_config,
        device: unit.device,
        variant: None,
        cache: dir,
    };
    let engine = engines.open(&target)?;
    let reference_config = spec
        .models
        .get(&unit.model)
        .map_or_else(|| unit.model_config.clone(), |m| m.reference_config());
    let oracle = if reference_config.engine == unit.model_config.engine {
        None
    } else {
        Some(engines.open(&crate::engines::Target {
            model: &reference_config,
            ..target
        })?)
    };
    Ok((engine, oracle, reference_config))
}

fn mutations_of(mesh: &MeshUnit, what: Runs) -> impl Iterator<Item = &str> {
    mesh.mutations
        .iter()
        .filter(move |_| what.mutations)
        .map(String::as_str)
}

/// Where a mutated run first leaves the reference: the checkpoint for save bugs (from the
/// roundtrip level's finding), the inputs where a rank trained on rows not the reference's
/// (the curve level's finding), else the run traced into `trace` and compared site by site
/// with `reference`'s trace. An engine's own mutation (not in the catalog) is a save bug when the
/// roundtrip level caught it first.
pub fn locate_mutation(
    engine: &dyn meshparity_engine::Engine,
    req: &RunRequest<'_>,
    o: &meshparity_judge::MutationOutcome,
    reference: &ReferenceTrace,
    trace: &Path,
) -> Result<Option<meshparity_judge::Localization>, meshparity_engine::EngineError> {
    let checkpoint = match meshparity_specs::catalog::find(&o.mutation) {
        Some(m) => m.phase == meshparity_specs::catalog::Phase::Checkpoint,
        None => o.caught_by.first() == Some(&Level::Roundtrip),
    };
    let roundtrip = o.levels.iter().find(|l| l.level == Level::Roundtrip);
    let saved = roundtrip.and_then(meshparity_judge::checkpoint_site);
    if checkpoint && saved.is_some() {
        return Ok(saved);
    }
    // Inputs not the reference's: the difference precedes any computation to trace.
    if let Some(l) = o.levels.iter().find_map(meshparity_judge::inputs::site) {
        return Ok(Some(l));
    }
    if checkpoint {
        return Ok(None);
    }
    // Caught by levels that read the first step's forward alone: traced as far as they read
    // (`ReferenceTrace::localize`), which is where the first divergence lies.
    let first_forward = |l: &Level| matches!(l, Level::Forward | Level::Routing);
    let caught = &o.caught_by;
    if !caught.is_empty() && caught.iter().all(first_forward) {
        let narrowed = RunRequest {
            levels: caught,
            ..*req
        };
        return reference.localize(engine, &narrowed, trace);
    }
    reference.localize(engine, req, trace)
}
