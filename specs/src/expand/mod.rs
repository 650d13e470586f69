//! Matrix expansion: `[[matrix]]` entries into cells (model × mesh × dtype, with their levels).
//!
//! The same walk serves validation (it reports every unknown name, misfit, unsupported level and
//! missing tolerance it meets) and planning (it returns the cells), so the two can never
//! disagree about what a spec selects.

use std::collections::HashSet;

use indexmap::IndexMap;

use crate::device::Device;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::dtype::DType;
use crate::fit;
use crate::level::Level;
use crate::matrix::MatrixEntry;
use crate::mesh::Mesh;
use crate::model::Model;
use crate::source::Located;
use crate::spec::Spec;
use crate::suggest;
use crate::tolerance::Limits;

mod levels;

/// One checked level of a cell and the limits it is held to.
#[derive(Clone, Debug)]
pub struct CellLevel<'s> {
    pub level: Level,
    /// The tolerance table the matrix entry named (or the default one).
    pub table: &'s str,
    /// The table that actually defined the limits (the named one or one it extends).
    pub defined_in: &'s str,
    pub limits: &'s Limits,
}

/// A model on a mesh in a dtype, with the levels to check there.
#[derive(Clone, Debug)]
pub struct Cell<'s> {
    pub model: &'s Model,
    pub mesh: &'s Mesh,
    pub dtype: DType,
    /// The model's device (jobs of one cell and its reference all compute there).
    pub device: Device,
    /// In DAG order.
    pub levels: Vec<CellLevel<'s>>,
    /// Whether the spec's mutations run on this cell.
    pub mutations: bool,
}

impl Spec {
    /// Every cell the matrix selects, in spec order. The spec must be valid (problems are
    /// skipped silently here; [`crate::load`] has already reported them).
    pub fn cells(&self) -> Vec<Cell<'_>> {
        expand(self, &mut Diagnostics::default())
    }
}

/// Expand the matrix, pushing a diagnostic for each problem met.
pub fn expand<'s>(spec: &'s Spec, diags: &mut Diagnostics) -> Vec<Cell<'s>> {
    let entries = &spec.matrix;
    let mut ex = Expansion {
        spec,
        diags,
        cells: IndexMap::new(),
        reported: HashSet::new(),
    };
    for entry in entries {
        ex.entry(entry);
    }
    ex.cells.into_values().collect()
}

struct Expansion<'s, 'd> {
    spec: &'s Spec,
    diags: &'d mut Diagnostics,
    cells: IndexMap<(&'s str, &'s str, DType), Cell<'s>>,
    /// Problems already reported, so a misfit shared by many cells is said once.
    reported: HashSet<String>,
}

impl<'s> Expansion<'s, '_> {
    fn once(&mut self, key: String, d: impl FnOnce() -> Diagnostic) {
        if self.reported.insert(key) {
            self.diags.push(d());
        }
    }

    /// Names listed in an entry, resolved against `defined`; all of them when the list is absent.
    fn resolve<T>(
        &mut self,
        list: &Option<Located<Vec<Located<String>>>>,
        defined: &'s IndexMap<String, T>,
        kind: &str,
    ) -> Vec<&'s T> {
        let Some(list) = list else {
            return defined.values().collect();
        };
        let names: Vec<&str> = defined.keys().map(String::as_str).collect();
        let mut out: Vec<&'s T> = Vec::new();
        let mut seen = HashSet::new();
        for name in &list.value {
            match defined.get_full(&name.value) {
                Some((i, _, v)) => {
                    if seen.insert(i) {
                        out.push(v);
                    } else {
                        self.diags.push(Diagnostic::warning(
                            &name.loc,
                            format!("{kind} `{}` is listed twice", name.value),
                        ));
                    }
                }
                // Defined under a misspelled section, already reported there.
                None if self
                    .spec
                    .stray
                    .iter()
                    .any(|(section, n)| *section == table_of(kind) && *n == name.value) => {}
                None => self.diags.push(
                    Diagnostic::error(&name.loc, format!("unknown {kind} `{}`", name.value))
                        .label(format!(
                            "no [{kind_table}.{}] in this spec",
                            name.value,
                            kind_table = table_of(kind)
                        ))
                        .help(suggest::did_you_mean(&name.value, &names, kind)),
                ),
            }
        }
        out
    }

    fn entry(&mut self, entry: &'s MatrixEntry) {
        let spec = self.spec;
        let errors_before = self.diags.error_count();
        let models = self.resolve(&entry.models, &spec.models, "model");
        let mut meshes = self.resolve(&entry.meshes, &spec.meshes, "mesh");
        meshes.extend(crate::resume::joining(&spec.resumed, &spec.meshes, &meshes));
        let Ok(named) = self.tolerance_name(entry) else {
            return;
        };
        self.check_exclude_names(entry);
        let mut used_excludes = vec![false; entry.exclude.len()];
        let mut selected = 0usize;
        for &model in &models {
            let device = spec.model_device(model);
            let table = named.unwrap_or_else(|| spec.default_tolerance(device));
            let dtypes: Vec<DType> = match &entry.dtypes {
                Some(d) => d.value.iter().map(|d| d.value).collect(),
                None => vec![spec.model_dtype(model)],
            };
            for &mesh in &meshes {
                let dtypes = Self::kept_dtypes(entry, (model, mesh), &dtypes, &mut used_excludes);
                if dtypes.is_empty() || !self.fits(model, mesh, entry) {
                    continue;
                }
                for &dtype in &dtypes {
                    let levels = self.levels(entry, model, mesh, dtype, table, &mut used_excludes);
                    selected += levels.len();
                    if !levels.is_empty() {
                        self.add_levels(entry, (model, mesh, dtype, device), levels);
                    }
                }
            }
        }
        self.report_unused_excludes(entry, &used_excludes);
        if selected == 0 && self.diags.error_count() == errors_before {
            self.diags.push(
                Diagnostic::error(
                    &entry.loc,
                    if entry.index == 0 {
                        "the spec selects no cell (it has no [[matrix]]: every model × mesh)".to_owned()
                    } else {
                        format!("matrix entry {} selects no cell", entry.index)
                    },
                )
                    .label("selects nothing")
                    .help("every model × mesh × level it names was excluded or not defined; check its lists and exclude rules"),
            );
        }
    }

    /// The entry's `tolerance` table by name (`None`: each model's default), or `Err` after
    /// reporting an unknown one.
    fn tolerance_name(&mut self, entry: &MatrixEntry) -> Result<Option<&'s str>, ()> {
        let Some(t) = &entry.tolerance else {
            return Ok(None);
        };
        match self.spec.tolerances.get_key_value(&t.value) {
            Some((k, _)) => Ok(Some(k.as_str())),
            None => {
                let names: Vec<&str> = self.spec.tolerances.keys().map(String::as_str).collect();
                self.diags.push(
                    Diagnostic::error(&t.loc, format!("unknown tolerance table `{}`", t.value))
                        .help(suggest::did_you_mean(&t.value, &names, "tolerance table")),
                );
                Err(())
            }
        }
    }

    /// The dtypes of a (model, mesh) cell that no level-less exclude rule drops (marking the
    /// rules that drop one as used). Such rules drop the whole cell before it is checked for
    /// fit: that is how a user leaves out a pair that cannot work.
    fn kept_dtypes(
        entry: &MatrixEntry,
        (model, mesh): (&Model, &Mesh),
        dtypes: &[DType],
        used_excludes: &mut [bool],
    ) -> Vec<DType> {
        dtypes
            .iter()
            .copied()
            .filter(|&dtype| {
                let mut dropped = false;
                for (i, rule) in entry.exclude.iter().enumerate() {
                    if rule.level.is_none()
                        && rule.matches(&model.name.value, &mesh.name.value, None, dtype)
                    {
                        used_excludes[i] = true;
                        dropped = true;
                    }
                }
                !dropped
            })
            .collect()
    }

    /// Adds an entry's levels to their cell, reporting a level another entry selected with a
    /// different tolerance table.
    fn add_levels(
        &mut self,
        entry: &MatrixEntry,
        (model, mesh, dtype, device): (&'s Model, &'s Mesh, DType, Device),
        levels: Vec<CellLevel<'s>>,
    ) {
        let cell = self
            .cells
            .entry((model.name.value.as_str(), mesh.name.value.as_str(), dtype))
            .or_insert_with(|| Cell {
                model,
                mesh,
                dtype,
                device,
                levels: Vec::new(),
                mutations: false,
            });
        cell.mutations |= entry.mutations;
        let mut conflicts = Vec::new();
        for l in levels {
            match cell.levels.iter().find(|c| c.level == l.level) {
                Some(prev) if prev.table != l.table => {
                    conflicts.push((l.level, prev.table, l.table))
                }
                Some(_) => {}
                None => cell.levels.push(l),
            }
        }
        cell.levels.sort_by_key(|l| l.level);
        let loc = entry
            .tolerance
            .as_ref()
            .map_or(&entry.loc, |t| &t.loc)
            .clone();
        for (level, first, second) in conflicts {
            self.once(format!("conflict/{}/{}/{dtype}/{level}", model.name.value, mesh.name.value), || {
                Diagnostic::error(
                    &loc,
                    format!(
                        "{level} on model `{}` mesh `{}` ({dtype}) is selected twice with different tolerance tables (`{first}` and `{second}`)",
                        model.name.value, mesh.name.value
                    ),
                )
                .help("select each cell once, or use the same `tolerance` in both entries")
            });
        }
    }

    fn report_unused_excludes(&mut self, entry: &MatrixEntry, used_excludes: &[bool]) {
        for (rule, &used) in entry.exclude.iter().zip(used_excludes) {
            if !used {
                self.diags.push(
                    Diagnostic::warning(
                        &rule.loc,
                        format!(
                            "this exclude rule of matrix entry {} matches no cell",
                            entry.index
                        ),
                    )
                    .help("remove it, or check its names"),
                );
            }
        }
    }

    fn check_exclude_names(&mut self, entry: &MatrixEntry) {
        for rule in &entry.exclude {
            for (name, defined, kind) in [
                (
                    &rule.model,
                    self.spec
                        .models
                        .keys()
                        .map(String::as_str)
                        .collect::<Vec<_>>(),
                    "model",
                ),
                (
                    &rule.mesh,
                    self.spec.meshes.keys().map(String::as_str).collect(),
                    "mesh",
                ),
            ] {
                if let Some(n) = name {
                    if !defined.contains(&n.value.as_str()) {
                        self.diags.push(
                            Diagnostic::error(
                                &n.loc,
                                format!("exclude rule names unknown {kind} `{}`", n.value),
                            )
                            .help(suggest::did_you_mean(&n.value, &defined, kind)),
                        );
                    }
                }
            }
        }
    }

    /// Report each broken divisibility rule of (model, mesh) once; true when the mesh fits.
    fn fits(&mut self, model: &Model, mesh: &Mesh, entry: &MatrixEntry) -> bool {
        let misfits = fit::check(model, mesh, &self.spec.run);
        for m in &misfits {
            let key = format!("fit/{}/{}/{}", model.name.value, mesh.name.value, m.message);
            self.once(key, || {
                let d = Diagnostic::error(
                    &m.mesh_loc,
                    format!("mesh `{}` does not fit model `{}`: {}", mesh.name.value, model.name.value, m.message),
                )
                .label("this degree")
                .help(if entry.index == 0 {
                    format!(
                        "{}; or add a [[matrix]] entry that leaves the pair out (without one, every model runs on every mesh)",
                        m.help
                    )
                } else {
                    format!(
                        "{}; or leave the pair out with `exclude = [{{ model = \"{}\", mesh = \"{}\" }}]`",
                        m.help, model.name.value, mesh.name.value
                    )
                })
                .related(
                    // A value the user never wrote is located at its table's header.
                    if m.other_loc == model.loc || m.other_loc == self.spec.run.loc {
                        format!("the {} default (not written; set it to change it)", m.other_what)
                    } else {
                        format!("the {} value", m.other_what)
                    },
                    &m.other_loc,
                );
                // A spec without [[matrix]] checks every pair: no entry to point at.
                if entry.index == 0 {
                    d
                } else {
                    d.related(format!("selected by matrix entry {}", entry.index), &entry.loc)
                }
            });
        }
        misfits.is_empty()
    }
}

fn table_of(kind: &str) -> &'static str {
    match kind {
        "model" => "models",
        "mesh" => "meshes",
        _ => "tolerances",
    }
}
