//! The seam between meshparity and whatever computes: an [`Engine`] runs one training (the
//! world-size-1 reference, or a mesh, with or without an injected mutation) and writes the
//! artifact contract ([`crate::artifact`]) into a directory. Everything after that (judging
//! levels, mutations' expected failure, reports) is `meshparity-judge`'s, engine-independent, so
//! every engine is held to the same checks.

use std::path::{Path, PathBuf};

use meshparity_specs::{DType, Level, MeshConfig, ModelConfig, Training, Unsupported};

use crate::artifact::{ArtifactError, Manifest};

/// One engine run.
#[derive(Clone, Copy, Debug)]
pub struct RunRequest<'a> {
    pub model: &'a ModelConfig,
    pub training: &'a Training,
    pub dtype: DType,
    /// The mesh to run; `None` is the world-size-1 reference.
    pub mesh: Option<&'a MeshConfig>,
    /// The levels that will be judged from this run: they decide which artifacts are needed
    /// and how many steps to train.
    pub levels: &'a [Level],
    /// A catalogued bug to inject (mesh runs only).
    pub mutation: Option<&'a str>,
    /// The reference's artifact directory (mesh runs, and traces): the roundtrip level converts
    /// its seed checkpoint to the mesh's shards and back; an engine may replay what the
    /// reference recorded (the burn engine replays its MoE routing). `None` for a mesh run the
    /// planner starts beside the reference (a built-in dense model): the engine then makes the
    /// seed checkpoint itself, from the same seed, and the roundtrip judge still compares it
    /// with the reference's file.
    pub reference: Option<&'a Path>,
    /// Where the artifacts go; created if missing.
    pub out: &'a Path,
    /// Trace the run as it trains, whatever its levels ask: a mutation run, which a caught
    /// mutation's localization then reads instead of running the mutated mesh again
    /// ([`crate::traced::TracedRuns`]). An engine may ignore it (the command engine does: its
    /// traced run is another run of the program, made when localization asks [`Engine::trace`]).
    pub trace: bool,
}

/// Training length a set of levels needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Length {
    /// Steps to train (0: nothing to train, e.g. only roundtrip).
    pub steps: usize,
    /// Step after which the weights are recorded (0: not recorded).
    pub weights_after: usize,
    /// Whether a level reads what a backward pass makes: gradients, updated weights, or any
    /// loss after the first step's. Without one (roundtrip, forward and routing only: a mutation
    /// run's first stage) an engine may run the first step's forward pass alone.
    pub backward: bool,
}

impl Length {
    /// Whether step `step` (from 0) needs its backward pass and update: the first step's
    /// gradients are an artifact, a later step's loss depends on every update before it, and
    /// the weights are recorded after `weights_after` steps. The last step's update is none of
    /// these unless the weights are recorded after it, so its forward (its loss) is all a run
    /// needs of it: a 4-step run saves a sixth of its arithmetic, and every artifact is the same
    /// to the bit.
    pub fn backward_at(&self, step: usize) -> bool {
        self.backward && (step == 0 || step + 1 < self.steps || step + 1 == self.weights_after)
    }
}

impl RunRequest<'_> {
    /// Steps this run must train: the reference runs long enough for every level; a mesh run
    /// only as long as its levels need.
    pub fn length(&self) -> Length {
        let t = self.training;
        if self.mesh.is_none() {
            return Length {
                steps: t.steps.max(t.oracle_steps).max(1) as usize,
                weights_after: t.oracle_steps as usize,
                backward: true,
            };
        }
        let mut len = Length {
            steps: 0,
            weights_after: 0,
            backward: false,
        };
        for level in self.levels {
            match level {
                Level::Forward | Level::Routing => len.steps = len.steps.max(1),
                Level::Curve => {
                    len.steps = len.steps.max(t.steps as usize);
                    len.backward = true;
                }
                Level::Oracle => {
                    len.steps = len.steps.max(t.oracle_steps as usize).max(1);
                    len.weights_after = t.oracle_steps as usize;
                    len.backward = true;
                }
                Level::Trace => {
                    len.steps = len.steps.max(crate::trace::STEPS);
                    len.backward = true;
                }
                Level::Roundtrip => {}
            }
        }
        // A `[[resume]]` pair's run trains its first mesh to the checkpoint whatever its
        // levels; its roundtrip level is the state saved there against the state loaded.
        if let Some(r) = &t.resume {
            len.steps = len.steps.max(r.at as usize);
            len.backward = true;
        }
        len
    }

    pub fn world_size(&self) -> u64 {
        self.mesh.map_or(1, |m| m.world_size())
    }
}

/// The engine and the device it computes on, for reports and cache keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    /// e.g. `burn-flex`, `burn-wgpu`, `command:jax-trainer`.
    pub engine: String,
    /// e.g. `cpu`, an adapter's label.
    pub device: String,
}

/// Why an engine run did not produce its artifacts.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("not supported by the {engine} engine: {unsupported}")]
    Unsupported {
        engine: String,
        unsupported: Unsupported,
    },
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    /// A file or directory the engine needed could not be made, read or written.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done: `creating`, `writing`, `copying the trace` …
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A mutation the engine does not declare.
    #[error("engine `{engine}` declares no mutation `{mutation}` (it declares: {})", declared.join(", "))]
    UnknownMutation {
        engine: String,
        mutation: String,
        declared: Vec<String>,
    },
    /// The named engine's program, or what it wrote, failed; the engine's own error is the
    /// source.
    #[error("engine `{engine}`: {source}")]
    Program {
        engine: String,
        #[source]
        source: Source,
    },
    /// The computation failed; the engine's own error type is the source (the burn engine's
    /// `LevelError`, a localization's `LocateError`).
    #[error(transparent)]
    Run(Source),
}

/// An engine's own error, kept typed behind [`EngineError`] (a `String` does not convert: say
/// what failed with a type).
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

impl EngineError {
    /// `e` as the computation's failure.
    pub fn run(e: impl std::error::Error + Send + Sync + 'static) -> EngineError {
        EngineError::Run(Box::new(e))
    }

    /// `action` on `path` failed (for `map_err`).
    pub fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> EngineError {
        let path = path.to_path_buf();
        move |source| EngineError::Io {
            action,
            path,
            source,
        }
    }

    /// `engine`'s program or its output failed with `e`.
    pub fn program(engine: &str, e: impl std::error::Error + Send + Sync + 'static) -> EngineError {
        EngineError::Program {
            engine: engine.to_owned(),
            source: Box::new(e),
        }
    }
}

/// Something that trains a model on a mesh and writes the artifact contract.
pub trait Engine {
    fn describe(&self) -> Description;

    /// Whether this engine can compute `model` in `dtype` on `mesh` (`None`: world size 1);
    /// asked by `validate`, `plan` and `run` for every cell before anything runs, and again by
    /// each run.
    fn supports(
        &self,
        model: &ModelConfig,
        mesh: Option<&MeshConfig>,
        dtype: DType,
    ) -> Result<(), Unsupported>;

    /// Whether a run's artifacts may be reused by a later run with the same job, engine, device
    /// and binary. A user's program can change between runs without meshparity knowing, so
    /// the command engine says no.
    fn cacheable(&self) -> bool {
        true
    }

    /// Whether a run trains only as long as its levels need ([`RunRequest::length`]), so a
    /// shorter run is cheaper. A user's program runs its own step count whatever is asked, so
    /// the command engine says no and a mutation is judged on one whole run
    /// (`meshparity_judge::check_until_caught`).
    fn runs_to_length(&self) -> bool {
        false
    }

    /// Mutation names this engine can inject.
    fn mutations(&self) -> Vec<String>;

    /// Whether `site` (localization's first divergence) is where this engine injects
    /// `mutation`, where the engine says where it does (a command engine's `site` glob);
    /// `None` defers to the catalog's site.
    fn injected_at(&self, _mutation: &str, _site: &str) -> Option<bool> {
        None
    }

    /// The world-size-1 oracle: seed checkpoint, and every artifact any level needs.
    fn reference(&self, req: &RunRequest<'_>) -> Result<Manifest, EngineError>;

    /// `req.mesh` (with `req.mutation` injected, if any): the artifacts its levels need.
    fn run(&self, req: &RunRequest<'_>) -> Result<Manifest, EngineError>;

    /// Per-site traces of `req` (the world-size-1 reference when `req.mesh` is `None`) into
    /// `req.out` ([`crate::trace`]), for localizing a failure. `false`: this engine cannot
    /// trace.
    fn trace(&self, _req: &RunRequest<'_>) -> Result<bool, EngineError> {
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::Length;

    #[test]
    fn only_the_last_step_of_a_run_whose_weights_come_earlier_skips_its_backward() {
        let len = |steps, weights_after, backward| Length {
            steps,
            weights_after,
            backward,
        };
        let at = |l: Length| (0..l.steps).map(|s| l.backward_at(s)).collect::<Vec<_>>();
        assert_eq!(at(len(4, 2, true)), [true, true, true, false]);
        assert_eq!(at(len(4, 4, true)), [true; 4]);
        assert_eq!(at(len(4, 0, true)), [true, true, true, false]);
        // One step: its gradients are an artifact.
        assert_eq!(at(len(1, 0, true)), [true]);
        assert_eq!(at(len(1, 0, false)), [false]);
    }
}
