//! The burn engine as the rest of meshparity sees it: an [`Engine`] on a device chosen at run
//! time. Nothing outside this crate names a burn type.

use burn::tensor::Device;
use meshparity_engine::{files, replay, Description, Engine, EngineError, Manifest, RunRequest};
use meshparity_specs::{DType, Field, Level, MeshConfig, ModelConfig, Unsupported};

use crate::device::{self, Adapter, DeviceError};
use crate::levels::{self, Roundtrip, Setup};
use crate::parallel::Fault;
use crate::support;
use crate::train;
use meshparity_engine::traced::{copy_trace, TracedRuns};
use meshparity_engine::Length;

/// A burn device and the jobs that run on it.
pub struct Backend {
    device: Device,
    adapter: Adapter,
    /// Runs that traced as they trained (the trace level's): a trace of the same run copies.
    traced: TracedRuns,
}

impl Backend {
    /// The flex CPU backend: the embedded default, bit-deterministic run to run.
    pub fn cpu() -> Self {
        Self::open(meshparity_specs::Device::Cpu).expect("the CPU is always there")
    }

    /// The backend of `device`, or why this binary or machine cannot offer it.
    pub fn open(device: meshparity_specs::Device) -> Result<Self, DeviceError> {
        let adapter = device::find(device)?;
        Ok(Self {
            device: device::burn_device(&adapter),
            adapter,
            traced: TracedRuns::default(),
        })
    }

    fn setup<'a>(&'a self, req: &RunRequest<'a>) -> Result<Setup<'a>, EngineError> {
        let describe = Engine::describe(self);
        let refuse = |unsupported| EngineError::Unsupported {
            engine: describe.engine.clone(),
            unsupported,
        };
        self.supports(req.model, req.mesh, req.dtype)
            .map_err(refuse)?;
        let setup = Setup {
            model: req.model,
            training: req.training,
            dtype: req.dtype,
            device: &self.device,
            describe: describe.clone(),
            repeatable: self.adapter.kind.is_none(),
        };
        if !self.device.supports_dtype(setup.burn_dtype()) {
            return Err(refuse(
                Unsupported::new(
                    Field::Dtype,
                    format!(
                        "dtype {} on {}: the adapter has no {} kernels",
                        req.dtype, describe.device, req.dtype
                    ),
                )
                .help("run this model on the CPU or another adapter"),
            ));
        }
        Ok(setup)
    }

    /// Run a job's computation. On a GPU the simulated ranks take turns on one thread: burn's
    /// wgpu streams are per thread, and ranks sharing tensors across threads gave wrong
    /// gradients there (tp2 losses off by 2e-3 after one step), while one thread matches the
    /// oracle. The CPU keeps its ranks in parallel.
    fn on_device<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        if self.adapter.kind.is_none() {
            return f();
        }
        match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
            Ok(pool) => pool.install(f),
            Err(_) => f(),
        }
    }
}

impl Engine for Backend {
    fn describe(&self) -> Description {
        let (engine, device) = describe(&self.adapter);
        Description {
            engine: engine.to_owned(),
            device,
        }
    }

    fn supports(
        &self,
        model: &ModelConfig,
        mesh: Option<&MeshConfig>,
        dtype: DType,
    ) -> Result<(), Unsupported> {
        support::supports(model, mesh, dtype)
    }

    /// A run trains as many steps as its levels need (a forward-only run one step).
    fn runs_to_length(&self) -> bool {
        true
    }

    fn mutations(&self) -> Vec<String> {
        Fault::all().map(|f| f.name().to_owned()).collect()
    }

    fn reference(&self, req: &RunRequest<'_>) -> Result<Manifest, EngineError> {
        let setup = self.setup(req)?;
        let len = req.length();
        let mut manifest = self
            .on_device(|| levels::reference(&setup, len, req.out))
            .map_err(EngineError::run)?;
        let traced = req.levels.is_empty() || req.levels.contains(&Level::Trace);
        if traced && req.training.resume.is_none() {
            // The trace level's reference side, and what localization compares every mesh
            // with: the same code as every mesh, on one rank ([`Engine::trace`]), replaying the
            // routing the oracle just recorded. A reference asked for no level in particular
            // records everything a level may judge, this included.
            let traced = RunRequest {
                mesh: None,
                mutation: None,
                reference: Some(req.out),
                ..*req
            };
            self.trace(&traced)?;
            manifest
                .artifacts
                .extend([files::TRACE.to_owned(), files::TRACE_INDEX.to_owned()]);
            manifest
                .write(req.out)
                .map_err(|e| EngineError::run(levels::LevelError::from(e)))?;
        }
        Ok(manifest)
    }

    fn run(&self, req: &RunRequest<'_>) -> Result<Manifest, EngineError> {
        let setup = self.setup(req)?;
        let Some(mesh) = req.mesh else {
            return self.reference(req);
        };
        let fault = fault(&setup, req)?;
        if let Some(from) = &req.training.resume {
            let (len, replay) = (req.length(), replay(req)?);
            return self
                .on_device(|| {
                    levels::resumed(&setup, mesh, from, len, fault, replay.as_ref(), req.out)
                })
                .map_err(EngineError::run);
        }
        let roundtrip = match req.reference {
            _ if !req.levels.contains(&Level::Roundtrip) => Roundtrip::No,
            Some(dir) => Roundtrip::Reference(dir),
            None => Roundtrip::OwnSeed,
        };
        let len = req.length();
        let replay = replay(req)?;
        let probe = train::Probe {
            fault,
            trace: req.trace || req.levels.contains(&Level::Trace),
            replay: replay.as_ref(),
        };
        let manifest = self
            .on_device(|| levels::run(&setup, mesh, len, probe, roundtrip, req.out))
            .map_err(EngineError::run)?;
        if probe.trace {
            self.traced.record(req, traced_steps(len), len.backward);
        }
        Ok(manifest)
    }

    /// The first steps on the mesh (or on one rank for the reference), every site traced.
    fn trace(&self, req: &RunRequest<'_>) -> Result<bool, EngineError> {
        // A resumed run's traces would be its second mesh's from the seed, not the run that
        // failed: its failures are localized by the state comparison alone.
        if req.training.resume.is_some() {
            return Ok(false);
        }
        let asked = req.length();
        let len = Length {
            steps: asked.steps.clamp(1, crate::parallel::trace::STEPS),
            weights_after: 0,
            // Levels that read the first step's forward alone (a failure the forward or routing
            // level found) trace that forward alone — the start of the whole trace, bit for bit
            // (`meshparity_judge::ReferenceTrace::localize` traces two whole steps only where no
            // site diverged in it). Anything longer traces two whole steps.
            backward: asked.backward || asked.steps > 1,
        };
        // The run traced as it trained (a mutation run: asked to, or judged at the trace
        // level): the same computation, the same bits (two whole steps hold the forward a
        // shorter trace asks for).
        let whole = traced_steps(Length {
            steps: crate::parallel::trace::STEPS,
            ..len
        });
        let found = [(traced_steps(len), len.backward), (whole, true)]
            .into_iter()
            .find_map(|(steps, backward)| self.traced.find(req, steps, backward));
        if let Some(from) = found {
            copy_trace(&from, req.out)?;
            return Ok(true);
        }
        let setup = self.setup(req)?;
        let fault = fault(&setup, req)?;
        // The reference's trace: the same code as every mesh, on one rank.
        let mesh = req.mesh.unwrap_or(&MeshConfig::SINGLE);
        let replay = replay(req)?;
        let probe = train::Probe {
            fault,
            trace: true,
            replay: replay.as_ref(),
        };
        let rec = self
            .on_device(|| {
                train::mesh(
                    setup.model,
                    mesh,
                    setup.training,
                    len,
                    probe,
                    setup.device,
                    setup.burn_dtype(),
                )
            })
            .map_err(EngineError::run)?;
        levels::trace::write(req.out, mesh.microbatches as usize, rec.trace)
            .map_err(EngineError::run)?;
        Ok(true)
    }
}

/// The steps a run of `len` traces: the first [`crate::parallel::trace::STEPS`].
fn traced_steps(len: Length) -> usize {
    len.steps.min(crate::parallel::trace::STEPS)
}

/// Why the reference's routing cannot be replayed.
#[derive(Debug, thiserror::Error)]
enum ReplayError {
    #[error("reading the routing to replay: {0}")]
    Read(meshparity_compare::InputError),
    #[error(
        "{}: step {step} does not fit the model ({layers} layers × {tokens} tokens × top-{k} of \
         {experts} experts); delete the cached reference to recompute it",
        path.display()
    )]
    Misfit {
        path: std::path::PathBuf,
        step: usize,
        layers: u32,
        tokens: usize,
        k: usize,
        experts: usize,
    },
}

/// The reference's routing, for a moe model's mesh runs and traces to replay (none for dense
/// models, a model with `routing_replay = false`, or a reference that recorded none).
fn replay(req: &RunRequest<'_>) -> Result<Option<train::Replay>, EngineError> {
    let Some(dir) = req.reference.filter(|_| req.model.replays_routing()) else {
        return Ok(None);
    };
    let path = dir.join(files::ROUTING_REPLAY);
    if !path.is_file() {
        return Ok(None);
    }
    let replay = replay::read_replay(&path).map_err(|e| EngineError::run(ReplayError::Read(e)))?;
    // A replay that does not fit this model would index past its tokens or experts.
    let m = req.model;
    let tokens = req.training.batch as usize * m.seq_len as usize;
    let (experts, k) = (
        m.experts.unwrap_or(1) as usize,
        m.top_k.unwrap_or(1) as usize,
    );
    for (step, layers) in replay.iter().enumerate() {
        let fits = layers.len() == m.layers as usize
            && layers.iter().all(|l| {
                let kept_fits = l
                    .kept
                    .as_ref()
                    .is_none_or(|kept| kept.len() == tokens && kept.iter().all(|s| s.len() == k));
                l.choices.len() == tokens
                    && kept_fits
                    && l.choices
                        .iter()
                        .all(|c| c.len() == k && c.iter().all(|&e| e < experts))
            });
        if !fits {
            return Err(EngineError::run(ReplayError::Misfit {
                path,
                step,
                layers: m.layers,
                tokens,
                k,
                experts,
            }));
        }
    }
    Ok(Some(replay))
}

/// The catalogued fault a request names.
fn fault(setup: &levels::Setup<'_>, req: &RunRequest<'_>) -> Result<Option<Fault>, EngineError> {
    req.mutation
        .map(|m| {
            Fault::from_name(m).ok_or_else(|| EngineError::Unsupported {
                engine: setup.describe.engine.clone(),
                unsupported: Unsupported::new(
                    Field::Model,
                    format!("mutation `{m}` is not in its catalog"),
                ),
            })
        })
        .transpose()
}

/// Backend name and device label of an adapter, without opening it (the runner's metadata).
pub fn describe(adapter: &Adapter) -> (&'static str, String) {
    match adapter.kind {
        None => ("burn-flex", "cpu".to_owned()),
        Some(_) => ("burn-wgpu", adapter.label()),
    }
}
