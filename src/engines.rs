//! The engines this binary offers, handed to the runner: the built-in burn engine (CPU or
//! GPU) for models without `engine`, the command engine for those naming an `[engines.NAME]`.
//! This is the one place the binary wires engines in.

use std::path::Path;

use meshparity_backends::{device, Backend};
use meshparity_command::{checkout, CommandEngine};
use meshparity_engine::{Description, Engine, RunRequest};
use meshparity_runner::{Engines, OpenError, Plan, Selection, Target};
use meshparity_specs::{Cell, Loaded, ModelConfig, Spec, SpecError};

pub struct Builtin;

impl Engines for Builtin {
    fn open(&self, t: &Target<'_>) -> Result<Box<dyn Engine>, OpenError> {
        if let Some(def) = engine_def(t.spec, t.model)? {
            let engine = CommandEngine::new(def.clone(), t.device);
            let Some(name) = t.variant else {
                return Ok(Box::new(engine));
            };
            let variant = t
                .spec
                .expect("a command engine's spec is loaded")
                .variants
                .get(name)
                .ok_or_else(|| OpenError::NoVariant(name.to_owned()))?;
            let checkout = match &variant.git {
                Some(rev) => Some(
                    checkout::checkout(name, &def.base_dir(), &rev.value, t.cache)
                        .map_err(OpenError::engine)?,
                ),
                None => None,
            };
            return Ok(Box::new(engine.variant(name, checkout)));
        }
        Ok(Box::new(
            Backend::open(t.device).map_err(OpenError::engine)?,
        ))
    }

    fn describe(&self, t: &Target<'_>) -> Result<Description, OpenError> {
        if let Some(def) = engine_def(t.spec, t.model)? {
            return Ok(CommandEngine::new(def.clone(), t.device).describe());
        }
        let adapter = device::find(t.device).map_err(OpenError::engine)?;
        let (engine, device) = meshparity_backends::backend::describe(&adapter);
        Ok(Description {
            engine: engine.to_owned(),
            device,
        })
    }
}

fn engine_def<'s>(
    spec: Option<&'s Spec>,
    model: &ModelConfig,
) -> Result<Option<&'s meshparity_specs::EngineDef>, OpenError> {
    let Some(name) = &model.engine else {
        return Ok(None);
    };
    let spec = spec.ok_or_else(|| OpenError::SpecNotLoaded(name.clone()))?;
    spec.engines
        .get(name)
        .map(Some)
        .ok_or_else(|| OpenError::NoEngine(name.clone()))
}

/// The cells of `loaded` that `selection` has mesh jobs in (all of them without one), checked
/// against what their engine computes: an unsupported model family or mesh axis, or a command
/// template naming an unknown value, is a spec error at the value that asks for it, before
/// anything runs.
pub fn check_support(
    loaded: &Loaded,
    selection: Option<(&Plan, &Selection)>,
) -> Result<(), SpecError> {
    // The (dtype, model, mesh) cells the selection has jobs in, once: asking the selection
    // per cell would cost cells × jobs (minutes at 100,000 jobs).
    let selected: Option<std::collections::HashSet<(String, &str, &str)>> =
        selection.map(|(plan, selection)| {
            selection
                .jobs
                .iter()
                .flat_map(|(n, _)| {
                    let job = &plan.graph[*n];
                    let mesh = job.mesh.as_deref();
                    job.models.iter().filter_map(move |m| {
                        mesh.map(|mesh| (job.dtype.to_string(), m.as_str(), mesh))
                    })
                })
                .collect()
        });
    let keep = |cell: &Cell<'_>| {
        selected.as_ref().is_none_or(|s| {
            s.contains(&(
                cell.dtype.to_string(),
                cell.model.name.value.as_str(),
                cell.mesh.name.value.as_str(),
            ))
        })
    };
    let spec = &loaded.spec;
    variants_resolve(spec)?;
    loaded.check_support(keep, |cell| {
        let model = cell.model.config();
        let mesh = cell.mesh.config();
        match spec.engine_of(&model) {
            Some(def) => {
                let req = RunRequest {
                    model: &model,
                    training: &spec.run.training,
                    dtype: cell.dtype,
                    mesh: Some(&mesh),
                    levels: &[],
                    mutation: None,
                    reference: None,
                    out: Path::new("OUT"),
                    trace: false,
                };
                meshparity_command::check_templates(def, &req)
            }
            None => {
                meshparity_backends::support::supports(&model, Some(&mesh), cell.dtype)?;
                // The host holds every simulated rank; a GPU's memory is its own business.
                match meshparity_backends::memory::available() {
                    Some(room) if cell.device == meshparity_specs::Device::Cpu => {
                        meshparity_backends::memory::fits(
                            &model,
                            Some(&mesh),
                            cell.dtype,
                            &spec.run.training,
                            room,
                        )
                    }
                    _ => Ok(()),
                }
            }
        }
    })
}

/// Every `git` variant names a commit of the repository that holds its spec (`run` would fail
/// each of its jobs otherwise).
fn variants_resolve(spec: &Spec) -> Result<(), SpecError> {
    let mut diags = meshparity_specs::diagnostic::Diagnostics::default();
    for v in spec.variants.values() {
        let Some(rev) = &v.git else { continue };
        let dir = rev.loc.path();
        let dir = dir
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if let Err(e) = checkout::resolve(dir, &rev.value) {
            diags.push(
                meshparity_specs::diagnostic::Diagnostic::error(
                    &rev.loc,
                    format!("variant `{}`: git ref `{}`: {e}", v.name.value, rev.value),
                )
                .help("a git variant names a commit, branch or tag of the repository that holds the spec"),
            );
        }
    }
    if diags.has_errors() {
        return Err(SpecError::Invalid(diags));
    }
    Ok(())
}
