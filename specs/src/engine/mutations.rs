//! `[engines.NAME.mutations]`: the bugs a user's program can inject, how to ask it to, and on
//! which meshes each exists.

use crate::decode::{kind_of, Ctx, Table};
use crate::diagnostic::Diagnostic;
use crate::env::string_table;
use crate::mutation::Needs;
use crate::source::Located;

pub const MUTATION_KEYS: &[&str] = &["args", "env", "models", "needs", "site"];

/// A bug the user's program can inject, and how to ask it to.
#[derive(Clone, Debug)]
pub struct EngineMutation {
    pub name: Located<String>,
    /// Extra arguments (templates) appended to the program's.
    pub args: Vec<Located<String>>,
    /// Extra environment (templates).
    pub env: Vec<(String, Located<String>)>,
    /// What a mesh needs for the bug to exist (default: more than one rank).
    pub needs: Vec<Needs>,
    /// Where the program injects it: globs on traced site names (`grad.*_norm.weight`), any of
    /// which a localized mutation's first divergence may match ("localized as injected"). More
    /// than one where the layout decides where a bug first shows (a rank's own initial draw:
    /// the embedding when every rank holds a shard of it, a later stage's first layer under
    /// pipelining). Empty: the declaration names no site.
    pub site: Vec<Located<String>>,
    /// `models`: globs on the spec's model names the bug exists for (empty: every model).
    pub models: Vec<Located<String>>,
}

impl EngineMutation {
    /// Whether localization's first diverging `site` is where the program injects the bug
    /// (`None`: the declaration names no site).
    pub fn injected_at(&self, site: &str) -> Option<bool> {
        if self.site.is_empty() {
            return None;
        }
        Some(
            self.site
                .iter()
                .any(|g| crate::catalog::glob(&g.value, site)),
        )
    }

    /// Whether the bug exists for `model` (a spec's model name) on `mesh` under `training`:
    /// only for the models `models` names (a bug one architecture can have), a bug of the
    /// resumption (`needs = ["resume"]`) only on a `[[resume]]` pair's mesh, every other bug
    /// only elsewhere (the catalog's rule, [`crate::Mutation::applies_to`]).
    pub fn applies_to(
        &self,
        model: &str,
        mesh: &crate::MeshConfig,
        training: &crate::Training,
    ) -> bool {
        let for_model = self.models.is_empty()
            || self
                .models
                .iter()
                .any(|g| crate::catalog::glob(&g.value, model));
        for_model
            && training.resume.is_some() == self.needs.contains(&Needs::Resume)
            && self.needs.iter().all(|n| match n {
                Needs::Adamw => training.optimizer == crate::Optimizer::Adamw,
                n => n.holds(mesh),
            })
    }
}

/// `[engines.NAME.mutations]`: `bug = ["--bug", "x"]` or `bug = { args, env, needs }`.
pub(super) fn mutations(
    cx: &mut Ctx<'_>,
    t: &mut Table<'_, '_>,
    engine: &str,
) -> Vec<EngineMutation> {
    let path = format!("engines.{engine}.mutations");
    let Some(v) = t.get("mutations") else {
        return Vec::new();
    };
    let Some(mut table) = Table::from_value(cx, v, path.clone()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in table.entries() {
        let name = Located::new(k.get_ref().to_string(), cx.loc(k));
        let here = format!("{path}.{}", name.value);
        let mut m = EngineMutation {
            name,
            args: Vec::new(),
            env: Vec::new(),
            needs: vec![Needs::MultiRank],
            site: Vec::new(),
            models: Vec::new(),
        };
        if v.get_ref().as_array().is_some() {
            m.args = words(cx, v, &here);
        } else if let Some(mut mt) = Table::from_value(cx, v, here.clone()) {
            if let Some(a) = mt.get("args") {
                m.args = words(cx, a, &format!("{here}.args"));
            }
            m.env = string_table(cx, &mut mt, "env");
            m.site = sites(cx, &mut mt, &here);
            m.models = mt
                .strings(cx, "models")
                .map(|v| v.value)
                .unwrap_or_default();
            if let Some(needs) = mt.strings(cx, "needs") {
                m.needs = needs
                    .value
                    .iter()
                    .filter_map(|n| match Needs::parse(&n.value) {
                        Some(x) => Some(x),
                        None => {
                            cx.error(
                                Diagnostic::error(&n.loc, format!("unknown need `{}`", n.value))
                                    .help(format!("one of: {}", Needs::NAMES.join(", "))),
                            );
                            None
                        }
                    })
                    .collect();
            }
            mt.finish(cx);
        }
        out.push(m);
    }
    out
}

/// `site`: a glob, or a non-empty list of them.
fn sites(cx: &mut Ctx<'_>, t: &mut Table<'_, '_>, path: &str) -> Vec<Located<String>> {
    let Some(v) = t.get("site") else {
        return Vec::new();
    };
    match v.get_ref() {
        toml::de::DeValue::String(s) => vec![Located::new(s.to_string(), cx.loc(v))],
        toml::de::DeValue::Array(items) if items.is_empty() => {
            // Read as "no site", it would silently leave the bug's localization unchecked.
            cx.error(Diagnostic::error(
                &cx.loc(v),
                format!(
                    "`{path}.site` is an empty list, which names no site: give the glob(s) \
                     where the program injects the bug, or leave `site` out"
                ),
            ));
            Vec::new()
        }
        toml::de::DeValue::Array(_) => t.strings(cx, "site").map(|v| v.value).unwrap_or_default(),
        other => {
            cx.error(Diagnostic::error(
                &cx.loc(v),
                format!(
                    "`{path}.site` must be a glob or a list of globs, found {}",
                    kind_of(other)
                ),
            ));
            Vec::new()
        }
    }
}

/// An array of strings as located words.
fn words(
    cx: &mut Ctx<'_>,
    v: &toml::Spanned<toml::de::DeValue<'_>>,
    path: &str,
) -> Vec<Located<String>> {
    let Some(items) = v.get_ref().as_array() else {
        cx.error(Diagnostic::error(
            &cx.loc(v),
            format!(
                "`{path}` must be an array of strings, found {}",
                kind_of(v.get_ref())
            ),
        ));
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|it| match it.get_ref().as_str() {
            Some(s) => Some(Located::new(s.to_owned(), cx.loc(it))),
            None => {
                cx.error(Diagnostic::error(
                    &cx.loc(it),
                    format!(
                        "items of `{path}` must be strings, found {}",
                        kind_of(it.get_ref())
                    ),
                ));
                None
            }
        })
        .collect()
}
