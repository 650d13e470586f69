//! The engines this binary offers, handed to the runner: the built-in burn engine on the CPU
//! or a GPU. This is the one place the binary wires a numeric backend in.

use meshparity_backends::{device, Backend};
use meshparity_engine::{Description, Engine};
use meshparity_runner::{Engines, Plan, Selection};
use meshparity_specs::{Cell, Device, Loaded, SpecError};

pub struct Builtin;

impl Engines for Builtin {
    fn open(&self, device: Device) -> Result<Box<dyn Engine>, String> {
        Ok(Box::new(Backend::open(device).map_err(|e| e.to_string())?))
    }

    fn describe(&self, device: Device) -> Result<Description, String> {
        let adapter = device::find(device).map_err(|e| e.to_string())?;
        let (engine, device) = meshparity_backends::backend::describe(&adapter);
        Ok(Description {
            engine: engine.to_owned(),
            device,
        })
    }
}

/// The cells of `loaded` that `selection` has mesh jobs in (all of them without one), checked
/// against what the engine computes: an unsupported model family or mesh axis is a spec error
/// at the value that asks for it, before anything runs.
pub fn check_support(
    loaded: &Loaded,
    selection: Option<(&Plan, &Selection)>,
) -> Result<(), SpecError> {
    let keep = |cell: &Cell<'_>| {
        let Some((plan, selection)) = selection else {
            return true;
        };
        selection.jobs.iter().any(|(n, _)| {
            let job = &plan.graph[*n];
            job.dtype == cell.dtype
                && job.models.contains(&cell.model.name.value)
                && job.mesh.as_ref() == Some(&cell.mesh.name.value)
        })
    };
    loaded.check_support(keep, |cell| {
        meshparity_backends::support::supports(
            &cell.model.config(),
            Some(&cell.mesh.config()),
            cell.dtype,
        )
    })
}
