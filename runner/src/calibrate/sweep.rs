//! Running the units over seeds and configurations, in this process and in parallel: one work
//! item is (configuration, unit, seed) — a reference run and every mesh and mutation judged
//! against it, in a scratch directory removed afterwards.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use meshparity_engine::{check, Gate, Outcome, RunRequest};
use meshparity_specs::{DType, Level, Spec};
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
    let mut items = Vec::new();
    for (c, us) in units.iter().enumerate() {
        for (u, unit) in us.iter().enumerate() {
            let last = opts.first_seed.saturating_add(opts.seeds);
            for seed in opts.first_seed..last {
                items.push((c, u, unit, seed));
            }
        }
    }
    let done = AtomicUsize::new(0);
    let total = items.len();
    let samples = items
        .par_iter()
        .flat_map_iter(|&(c, u, unit, seed)| {
            let dir = opts.scratch.join(format!("c{c}-u{u}-s{seed}"));
            let out = run_unit(spec, engines, c, unit, seed, &dir);
            let _ = std::fs::remove_dir_all(&dir);
            progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
            out
        })
        .collect();
    Ok(samples)
}

fn run_unit(
    spec: &Spec,
    engines: &dyn Engines,
    config: usize,
    unit: &Unit,
    seed: u64,
    dir: &Path,
) -> Vec<Sample> {
    let mut training = unit.training.clone();
    training.seed = seed;
    let sample = |mesh: &MeshUnit, mutation: Option<&str>| Sample {
        config,
        seed,
        model: unit.model.clone(),
        dtype: unit.dtype,
        mesh: mesh.name.clone(),
        mutation: mutation.map(str::to_owned),
        levels: Vec::new(),
        injected: false,
        error: None,
    };
    let every = |error: String| -> Vec<Sample> {
        unit.meshes
            .iter()
            .flat_map(|m| {
                let runs =
                    std::iter::once(None).chain(m.mutations.iter().map(|x| Some(x.as_str())));
                runs.map(|mutation| Sample {
                    error: Some(error.clone()),
                    ..sample(m, mutation)
                })
                .collect::<Vec<_>>()
            })
            .collect()
    };
    let target = crate::engines::Target {
        spec: Some(spec),
        model: &unit.model_config,
        device: unit.device,
        variant: None,
        cache: dir,
    };
    let engine = match engines.open(&target) {
        Ok(e) => e,
        Err(e) => return every(e),
    };
    // The model's reference may run on another engine (`reference = "NAME"`).
    let reference_config = spec
        .models
        .get(&unit.model)
        .map_or_else(|| unit.model_config.clone(), |m| m.reference_config());
    let oracle = if reference_config.engine == unit.model_config.engine {
        None
    } else {
        match engines.open(&crate::engines::Target {
            model: &reference_config,
            ..target
        }) {
            Ok(e) => Some(e),
            Err(e) => return every(e),
        }
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
    };
    if let Err(e) = oracle.as_deref().unwrap_or(engine.as_ref()).reference(&req) {
        return every(format!("reference: {e}"));
    }
    let mut out = Vec::new();
    for mesh in &unit.meshes {
        let runs = std::iter::once(None).chain(mesh.mutations.iter().map(|m| Some(m.as_str())));
        let levels: Vec<Level> = mesh.levels.iter().map(|(l, _)| *l).collect();
        for mutation in runs {
            let name = mutation.unwrap_or("correct");
            let here = dir.join(&mesh.name).join(name);
            let run = here.join("run");
            let req = RunRequest {
                model: &unit.model_config,
                mesh: Some(&mesh.config),
                levels: &levels,
                mutation,
                reference: Some(&reference),
                out: &run,
                ..req
            };
            let mut s = sample(mesh, mutation);
            match check(engine.as_ref(), &req, &mesh.levels, &reference, &here) {
                Ok(c) => {
                    s.levels = c.outcomes.iter().map(LevelSample::of).collect();
                    s.injected = !c.manifest.altered.is_empty();
                }
                Err(e) => s.error = Some(e.to_string()),
            }
            out.push(s);
        }
    }
    out
}
