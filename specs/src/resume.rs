//! `[[resume]]`: a mesh trains `at` steps and saves its checkpoint in its own sharded layout;
//! another layout (or world size 1) loads it and trains on. Each (from, to) pair becomes a mesh
//! of its own, `FROM-to-TO-atK`, checked like any other against the uninterrupted reference:
//! its curve over every step and its weights after `oracle_steps`; its roundtrip level is the
//! saved state against the state the target loaded (bit-exact).
//!
//! A resumed mesh joins every `[[matrix]]` entry that selects its `from` mesh, with that entry's
//! models, dtypes and tolerances, at the levels a resumption changes (roundtrip, curve, oracle).

use indexmap::IndexMap;

use crate::decode::{Ctx, Table};
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::mesh::Mesh;
use crate::run::Training;
use crate::source::{Loc, Located};
use crate::suggest;

pub const KEYS: &[&str] = &["from", "to", "at"];

/// The name that means world size 1 in a pair, unless the spec defines a mesh of that name.
pub const WORLD1: &str = "world1";

pub use crate::mesh::ResumeFrom;

type Names = Located<Vec<Located<String>>>;

/// One `[[resume]]` entry as written.
#[derive(Clone, Debug)]
pub struct ResumePair {
    pub from: Option<Names>,
    pub to: Option<Names>,
    pub at: Option<Located<u32>>,
    pub loc: Loc,
}

impl ResumePair {
    pub fn decode(cx: &mut Ctx<'_>, mut t: Table<'_, '_>) -> ResumePair {
        let pair = ResumePair {
            from: t.strings(cx, "from"),
            to: t.strings(cx, "to"),
            at: t.positive(cx, "at"),
            loc: t.loc.clone(),
        };
        for (key, missing) in [
            ("from", pair.from.is_none()),
            ("to", pair.to.is_none()),
            ("at", pair.at.is_none()),
        ] {
            // A key written wrongly was reported where it is written.
            if missing && t.key_loc(cx, key).is_none() {
                cx.error(
                    Diagnostic::error(&pair.loc, format!("`resume` entry has no `{key}`"))
                        .help("write `from = [\"tp2\"]`, `to = [\"world1\", \"pp2\"]`, `at = 2`"),
                );
            }
        }
        t.finish(cx);
        pair
    }
}

/// The name of the mesh a pair makes.
pub fn name(from: &str, to: &str, at: u32) -> String {
    format!("{from}-to-{to}-at{at}")
}

/// The meshes every pair makes, by name, each with its `resume` set: `to`'s axes, resumed from
/// `from` after `at` steps. Unknown names and a step past the run are reported here.
pub fn meshes(
    pairs: &[ResumePair],
    meshes: &IndexMap<String, Mesh>,
    training: &Training,
    diags: &mut Diagnostics,
) -> IndexMap<String, Mesh> {
    let mut out = IndexMap::new();
    for pair in pairs {
        let (Some(from), Some(to), Some(at)) = (&pair.from, &pair.to, &pair.at) else {
            continue;
        };
        let last = training.steps.min(training.oracle_steps);
        if at.value >= last {
            diags.push(
                Diagnostic::error(
                    &at.loc,
                    format!(
                        "`at = {}` leaves nothing to resume: the run checks {} steps (curve) and the weights after {} (oracle)",
                        at.value, training.steps, training.oracle_steps
                    ),
                )
                .label("the step the checkpoint is saved after")
                .help(format!("resume at a step from 1 to {}", last.saturating_sub(1))),
            );
            continue;
        }
        for f in &from.value {
            let Some(a) = lookup(f, meshes, diags) else {
                continue;
            };
            for t in &to.value {
                let Some(b) = lookup(t, meshes, diags) else {
                    continue;
                };
                let n = name(&f.value, &t.value, at.value);
                if crate::names::MAX_NAME < n.len() {
                    diags.push(
                        Diagnostic::error(&pair.loc, format!("the pair's mesh name `{n}` is {} bytes long", n.len()))
                            .help(format!("mesh names of a pair are at most {} bytes in all; shorten the meshes' names", crate::names::MAX_NAME)),
                    );
                    continue;
                }
                let mut mesh = b.clone();
                mesh.name = Located::new(n.clone(), pair.loc.clone());
                mesh.resume = Some(ResumeFrom {
                    mesh: f.value.clone(),
                    config: a.config(),
                    at: at.value,
                });
                out.insert(n, mesh);
            }
        }
    }
    out
}

/// The pairs' meshes that join a `[[matrix]]` entry selecting `meshes`: those resumed from one
/// of them, and those resumed from world size 1 (every entry has it).
/// `resumed` are the spec's pairs' meshes, `defined` its `[meshes]`.
pub(crate) fn joining<'s>(
    resumed: &'s IndexMap<String, Mesh>,
    defined: &IndexMap<String, Mesh>,
    meshes: &[&'s Mesh],
) -> Vec<&'s Mesh> {
    resumed
        .values()
        .filter(|r| {
            let Some(from) = &r.resume else { return false };
            meshes.iter().any(|m| m.name.value == from.mesh)
                || (from.mesh == WORLD1 && !defined.contains_key(WORLD1))
        })
        .collect()
}

/// Whether `level` is judged on `mesh`: every level on a plain mesh; on a pair's, those a
/// resumption changes (what is saved, what trains after it), not the first step's forward,
/// which is the `from` mesh's own cells'.
pub(crate) fn judged(mesh: &Mesh, level: crate::level::Level) -> bool {
    use crate::level::Level;
    mesh.resume.is_none() || matches!(level, Level::Roundtrip | Level::Curve | Level::Oracle)
}

/// A mesh of the spec, or world size 1 under its reserved name.
fn lookup(
    name: &Located<String>,
    meshes: &IndexMap<String, Mesh>,
    diags: &mut Diagnostics,
) -> Option<Mesh> {
    if let Some(m) = meshes.get(&name.value) {
        return Some(m.clone());
    }
    if name.value == WORLD1 {
        return Some(Mesh::single(name.clone()));
    }
    let mut names: Vec<&str> = meshes.keys().map(String::as_str).collect();
    names.push(WORLD1);
    diags.push(
        Diagnostic::error(&name.loc, format!("unknown mesh `{}`", name.value))
            .label("no [meshes] of this name")
            .help(suggest::did_you_mean(&name.value, &names, "mesh")),
    );
    None
}
