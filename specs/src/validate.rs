//! Semantic checks on a merged spec: everything that needs more than one table to see.

use std::collections::HashSet;

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::expand::expand;
use crate::mesh::Schedule;
use crate::spec::Spec;
use crate::suggest;

pub fn validate(spec: &Spec, diags: &mut Diagnostics) {
    check_extends(spec, diags);
    check_meshes(spec, diags);
    check_engines(spec, diags);
    check_mutation_models(spec, diags);
    let cells = expand(spec, diags);
    for (name, loc) in &spec.mutations.written {
        let applies = cells.iter().any(|c| {
            c.mutations
                && spec.mutations.selected.iter().any(|m| {
                    m.name == *name
                        && m.applies_to(
                            &c.model.config(),
                            &c.mesh.config(),
                            &spec.training_on(c.mesh),
                        )
                })
        });
        // With errors, meshes or models were refused: "applies to no mesh" would follow on.
        if !applies && diags.error_count() == 0 {
            let needs: Vec<&str> = crate::mutation::find(name)
                .map(|m| m.needs.iter().map(|n| n.describe()).collect())
                .unwrap_or_default();
            diags.push(
                Diagnostic::warning(
                    loc,
                    format!("mutation `{name}` applies to no selected mesh"),
                )
                .help(format!("it needs a mesh with {}", needs.join(" and "))),
            );
        }
    }
}

/// `extends` must name a table, and following it must end.
fn check_extends(spec: &Spec, diags: &mut Diagnostics) {
    let names: Vec<&str> = spec.tolerances.keys().map(String::as_str).collect();
    for table in spec.tolerances.values() {
        let Some(ext) = &table.extends else { continue };
        if !spec.tolerances.contains_key(&ext.value) {
            diags.push(
                Diagnostic::error(
                    &ext.loc,
                    format!(
                        "tolerance table `{}` extends unknown table `{}`",
                        table.name.value, ext.value
                    ),
                )
                .help(suggest::did_you_mean(&ext.value, &names, "tolerance table")),
            );
            continue;
        }
        let mut seen = HashSet::new();
        let mut chain = vec![table.name.value.as_str()];
        let mut cur = table;
        while let Some(next) = cur
            .extends
            .as_ref()
            .and_then(|e| spec.tolerances.get(&e.value))
        {
            chain.push(&next.name.value);
            if next.name.value == table.name.value || !seen.insert(next.name.value.as_str()) {
                diags.push(
                    Diagnostic::error(
                        &ext.loc,
                        format!(
                            "tolerance tables extend each other in a cycle: {}",
                            chain.join(" → ")
                        ),
                    )
                    .help("one table of the cycle must stop extending"),
                );
                break;
            }
            cur = next;
        }
    }
}

fn check_meshes(spec: &Spec, diags: &mut Diagnostics) {
    for mesh in spec.meshes.values() {
        let (pp, mb) = (mesh.pp.value, mesh.microbatches.value);
        if pp > 1 && mb < pp && mesh.schedule.value == Schedule::OneFOneB {
            diags.push(
                Diagnostic::warning(
                    &mesh.microbatches.loc,
                    format!("mesh `{}`: 1F1B with fewer microbatches ({mb}) than stages ({pp}) never reaches steady state", mesh.name.value),
                )
                .help("use microbatches ≥ pp to exercise the interleaving of forward and backward"),
            );
        }
    }
}

/// A model's `engine` must name an `[engines.NAME]` table; variants apply to such models only.
fn check_engines(spec: &Spec, diags: &mut Diagnostics) {
    if let Some(v) = spec.variants.values().next() {
        if spec.models.values().all(|m| m.engine.is_none()) {
            diags.push(
                Diagnostic::warning(
                    &v.name.loc,
                    "[variants] apply to models of a command engine, and this spec has none",
                )
                .help("the built-in engine's models are checked against world size 1 as usual"),
            );
        }
    }
    let names: Vec<&str> = spec.engines.keys().map(String::as_str).collect();
    for model in spec.models.values() {
        if let (Some(r), None) = (&model.reference, &model.engine) {
            diags.push(
                Diagnostic::error(
                    &r.loc,
                    format!(
                        "model `{}`: `reference` needs an `engine`",
                        model.name.value
                    ),
                )
                .help("the built-in engine is its own reference; remove `reference`"),
            );
        }
        for engine in [&model.engine, &model.reference].into_iter().flatten() {
            if spec.engines.contains_key(&engine.value) {
                continue;
            }
            diags.push(
                Diagnostic::error(
                    &engine.loc,
                    format!(
                        "model `{}` names unknown engine `{}`",
                        model.name.value, engine.value
                    ),
                )
                .help(if names.is_empty() {
                    format!(
                        "define it: [engines.{}] with kind = \"command\" and a program",
                        engine.value
                    )
                } else {
                    suggest::did_you_mean(&engine.value, &names, "engine")
                }),
            );
        }
    }
}

/// An engine mutation's `models` glob that matches none of the spec's models but is a near miss
/// of one (`qwne3*` beside `qwen3-moe`) is a typo that would silently run the bug nowhere. A
/// glob far from every name stays quiet: an engine file included by several specs (hf.toml)
/// names bugs for models some of them do not have.
fn check_mutation_models(spec: &Spec, diags: &mut Diagnostics) {
    let names: Vec<&str> = spec.models.keys().map(String::as_str).collect();
    for (engine, def) in &spec.engines {
        for m in &def.mutations {
            for g in &m.models {
                if names.iter().any(|n| crate::catalog::glob(&g.value, n)) {
                    continue;
                }
                let Some(near) = near_miss(&g.value, &names) else {
                    continue;
                };
                diags.push(
                    Diagnostic::warning(
                        &g.loc,
                        format!(
                            "`models` glob `{}` of engines.{engine}.mutations.{} matches no model",
                            g.value, m.name.value
                        ),
                    )
                    .help(format!(
                        "did you mean model `{near}`? As written the bug runs for no model"
                    )),
                );
            }
        }
    }
}

/// The model whose name (cut to the glob's literal length where the glob ends in `*`) is within
/// a typo of the glob's literal text; globs shorter than three letters never count.
fn near_miss<'a>(glob: &str, names: &[&'a str]) -> Option<&'a str> {
    let literal: String = glob.chars().filter(|&c| c != '*').collect();
    let open = glob.ends_with('*');
    if literal.chars().count() < 3 {
        return None; // `m*` is one letter from every name: no evidence of a typo
    }
    names.iter().copied().find(|n| {
        let cut: String = if open {
            n.chars().take(literal.chars().count()).collect()
        } else {
            (*n).to_owned()
        };
        suggest::closest(&literal, [cut.as_str()]).is_some()
    })
}
