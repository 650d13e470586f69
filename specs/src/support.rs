//! What an engine can compute, asked before anything runs: a cell the engine cannot compute
//! (a family it does not implement, a parallel axis it does not simulate) is a spec error at
//! the value that asks for it, never a crash at run time or, worse, a pass of something else.

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::expand::Cell;
use crate::load::{Loaded, SpecError};
use crate::source::Loc;

/// The spec value an engine cannot honor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// The model's `family`.
    Family,
    /// A mesh degree or option: `dp`, `tp`, `pp`, `cp`, `ep`, `etp`, `sp`, `schedule`.
    Axis(&'static str),
    /// The matrix's dtype for this cell.
    Dtype,
    /// The model as a whole (its size, its keys).
    Model,
    /// The model's `engine` (a command engine's templates).
    Engine,
}

/// Why an engine cannot compute a cell, and what to do instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Unsupported {
    pub field: Field,
    pub message: String,
    pub help: Option<String>,
}

impl Unsupported {
    pub fn new(field: Field, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
            help: None,
        }
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// Where in the spec `field` of `cell` was written.
fn locate<'a>(cell: &'a Cell<'_>, field: Field) -> &'a Loc {
    let mesh = cell.mesh;
    match field {
        Field::Family => &cell.model.family.loc,
        Field::Model => &cell.model.name.loc,
        Field::Engine => cell
            .model
            .engine
            .as_ref()
            .map_or(&cell.model.name.loc, |e| &e.loc),
        Field::Dtype => cell
            .model
            .dtype
            .as_ref()
            .map_or(&cell.model.name.loc, |d| &d.loc),
        Field::Axis(axis) => mesh.loc_of(axis).unwrap_or(&mesh.name.loc),
    }
}

impl Loaded {
    /// Ask `supports` about every cell `keep` selects; each cell it refuses is an error at the
    /// value that asks for it (once per value, however many cells share it).
    pub fn check_support(
        &self,
        keep: impl Fn(&Cell<'_>) -> bool,
        supports: impl Fn(&Cell<'_>) -> Result<(), Unsupported>,
    ) -> Result<(), SpecError> {
        let mut diags = Diagnostics::default();
        let mut seen: Vec<(Loc, String)> = Vec::new();
        for cell in self.spec.cells().iter().filter(|c| keep(c)) {
            let Err(e) = supports(cell) else { continue };
            let cell = cell.clone();
            let loc = locate(&cell, e.field).clone();
            let key = (loc.clone(), e.message.clone());
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let message = format!(
                "model `{}` on mesh `{}` ({}): {}",
                cell.model.name.value, cell.mesh.name.value, cell.dtype, e.message
            );
            diags.push(Diagnostic::error(&loc, message).help_opt(e.help.clone()));
        }
        if diags.has_errors() {
            diags.sort();
            return Err(SpecError::Invalid(diags));
        }
        Ok(())
    }
}
