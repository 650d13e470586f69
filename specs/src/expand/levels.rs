//! Each cell's levels: which the matrix entry selects (or the defaults), the limits each is held
//! to from the cell's tolerance table, and whether a command engine writes what a level reads.

use super::{CellLevel, Expansion};
use crate::diagnostic::Diagnostic;
use crate::dtype::DType;
use crate::level::Level;
use crate::matrix::MatrixEntry;
use crate::mesh::Mesh;
use crate::model::Model;
use crate::source::Loc;
use crate::suggest;

impl<'s> Expansion<'s, '_> {
    pub(super) fn levels(
        &mut self,
        entry: &MatrixEntry,
        model: &'s Model,
        mesh: &Mesh,
        dtype: DType,
        table: &'s str,
        used_excludes: &mut [bool],
    ) -> Vec<CellLevel<'s>> {
        let family = model.family.value;
        let wanted: Vec<(Level, Loc)> = match &entry.levels {
            Some(l) => l.value.iter().map(|l| (l.value, l.loc.clone())).collect(),
            None => family
                .levels()
                .iter()
                .map(|&l| (l, entry.loc.clone()))
                .collect(),
        };
        let wanted = with_trace(wanted, entry.levels.is_some());
        let mut out = Vec::new();
        for (level, loc, explicit) in wanted {
            if !crate::resume::judged(mesh, level) {
                continue;
            }
            if level == Level::Trace && !explicit {
                // Implied by `oracle`: judged where the table gates it and the engine traces
                // (a command engine that maps no `trace` directory drops it in `engine_writes`).
                let gated = self.spec.limits(table, level, dtype).is_some();
                let implied = family.trace_implied(model.engine.is_some());
                if !gated || !implied || mesh.resume.is_some() {
                    continue;
                }
            }
            if !family.levels().contains(&level) {
                self.unsupported_level(entry, model, level, &loc);
                continue;
            }
            if !self.engine_writes(model, mesh, level, &loc, explicit) {
                continue;
            }
            let mut excluded = false;
            for (i, rule) in entry.exclude.iter().enumerate() {
                if rule.matches(&model.name.value, &mesh.name.value, Some(level), dtype) {
                    used_excludes[i] = true;
                    excluded = true;
                }
            }
            if excluded {
                continue;
            }
            match self.spec.limits(table, level, dtype) {
                Some((defined_in, limits)) => out.push(CellLevel {
                    level,
                    table,
                    defined_in,
                    limits,
                }),
                None => self.no_limits(entry, table, level, dtype),
            }
        }
        out
    }

    /// `level` asked of `model`, whose family does not have it (said once per entry).
    fn unsupported_level(&mut self, entry: &MatrixEntry, model: &Model, level: Level, loc: &Loc) {
        let family = model.family.value;
        let supported: Vec<&str> = family.levels().iter().map(|l| l.as_str()).collect();
        self.once(
            format!("level/{}/{level}/{}", model.name.value, entry.index),
            || {
                Diagnostic::error(
                    loc,
                    format!(
                        "level `{level}` is not supported by family `{}` (model `{}`)",
                        family.as_str(),
                        model.name.value
                    ),
                )
                .label("unsupported level")
                .help(format!(
                    "family `{}` supports {}",
                    family.as_str(),
                    suggest::quote_list(&supported)
                ))
                .related("model defined here", &model.name.loc)
            },
        );
    }

    /// `entry`'s tolerance table `table` has no limits for `level` in `dtype` (said once).
    fn no_limits(&mut self, entry: &MatrixEntry, table: &str, level: Level, dtype: DType) {
        let at = entry
            .tolerance
            .as_ref()
            .map_or(&entry.loc, |t| &t.loc)
            .clone();
        let def = self.spec.tolerances.get(table).map(|t| t.loc.clone());
        self.once(format!("tol/{table}/{level}/{dtype}"), || {
            let d = Diagnostic::error(
                &at,
                format!("tolerance table `{table}` has no limits for level `{level}` in dtype `{dtype}`"),
            )
            .label(format!("used for {dtype} here"))
            .help(format!(
                "add `{level}.{dtype} = {{ ... }}` to [tolerances.{table}], or `extends = \"builtin\"` to start from the defaults"
            ));
            match def {
                Some(l) => d.related("table defined here", &l),
                None => d,
            }
        });
    }
}

/// `wanted` with whether each was asked by name, and `trace` after `oracle` where the entry
/// asks for `oracle` but not `trace` (the per-site gate comes with the gradients' and
/// updates'; `exclude = [{ level = "trace" }]` leaves it out).
fn with_trace(wanted: Vec<(Level, Loc)>, named: bool) -> Vec<(Level, Loc, bool)> {
    let traced = wanted.iter().any(|(l, _)| *l == Level::Trace);
    let mut out = Vec::with_capacity(wanted.len() + 1);
    for (level, loc) in wanted {
        let implied = (level == Level::Oracle && !traced).then(|| loc.clone());
        out.push((level, loc, named));
        if let Some(loc) = implied {
            out.push((Level::Trace, loc, false));
        }
    }
    out
}

impl Expansion<'_, '_> {
    /// Whether the engines of a command-engine model map every file `level` is judged from
    /// (its own for the mesh runs, its reference engine's for the world-size-1 run). A level
    /// the matrix names explicitly is an error at that name otherwise; one selected by default
    /// is left out, since the engine cannot produce it.
    fn engine_writes(
        &mut self,
        model: &Model,
        mesh: &Mesh,
        level: Level,
        at: &Loc,
        explicit: bool,
    ) -> bool {
        let Some(engine) = &model.engine else {
            return true;
        };
        let reference = model.reference.as_ref().unwrap_or(engine);
        let sides = [(engine, false), (reference, true)];
        let mut writes = true;
        for (name, is_reference) in sides {
            // One engine on both sides needs the same files, but for the round trip's.
            if is_reference && name.value == engine.value && level != Level::Roundtrip {
                continue;
            }
            let Some(def) = self.spec.engines.get(&name.value) else {
                continue;
            };
            let resumed = mesh.resume.is_some();
            let missing = def.artifacts.unmapped(level, is_reference, resumed);
            if missing.is_empty() {
                continue;
            }
            if explicit {
                let keys: Vec<String> = missing.iter().map(|k| format!("`{k}`")).collect();
                let role = if is_reference {
                    "reference runs"
                } else {
                    "mesh runs"
                };
                self.once(format!("artifacts/{}/{level}/{is_reference}", def.name.value), || {
                    Diagnostic::error(
                        at,
                        format!(
                            "level `{level}` needs {} in [engines.{}.artifacts] (its {role}), which it does not map",
                            keys.join(" and "),
                            def.name.value
                        ),
                    )
                    .label("not judgeable from this engine's files")
                    .help("map the file your program writes for it, or leave the level out of the matrix (docs/engines.md: what the files hold)")
                    .related("engine defined here", &def.name.loc)
                });
            }
            writes = false;
        }
        writes
    }
}
