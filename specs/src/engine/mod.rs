//! `[engines.NAME]`: a user's own training program as an engine. A model that says
//! `engine = "NAME"` is trained by running that program (once at world size 1 for its
//! reference, once per mesh), and judged from the files it writes, mapped to meshparity's
//! artifact names by `[engines.NAME.artifacts]`.
//!
//! `program`, `args`, `env` and `cwd` are templates over the job's values (`{{name}}`
//! insertions, [`crate::template`]: mesh degrees, seed, steps, dtype, out_dir, the model's
//! keys...). Without `shell = true` the
//! rendered words are an argv, never parsed by a shell, so no spec value can inject a command.

use crate::decode::{Ctx, Table};
use crate::diagnostic::Diagnostic;
use crate::env::string_table;
use crate::source::{Loc, Located};

mod artifacts;
mod checks;
mod mutations;

use artifacts::artifact_map;
pub use artifacts::{ArtifactMap, ARTIFACT_KEYS, DEFAULT_GATED};
use mutations::mutations;
pub use mutations::{EngineMutation, MUTATION_KEYS};

pub const KEYS: &[&str] = &[
    "kind",
    "program",
    "args",
    "shell",
    "env",
    "defaults",
    "cwd",
    "artifacts",
    "mutations",
    "trace",
    "shrink",
];
/// A command engine as written.
#[derive(Clone, Debug)]
pub struct EngineDef {
    pub name: Located<String>,
    pub program: Located<String>,
    pub args: Vec<Located<String>>,
    /// Run `program` (and the args) through `sh -c`, values shell-quoted.
    pub shell: bool,
    pub env: Vec<(String, Located<String>)>,
    /// `defaults`: values the templates may name that a model need not set (a model's own key,
    /// or a value meshparity sets, wins).
    pub defaults: Vec<(String, Located<String>)>,
    /// Working directory (template), relative to the file that defines the engine.
    pub cwd: Option<Located<String>>,
    pub artifacts: ArtifactMap,
    pub mutations: Vec<EngineMutation>,
    /// `trace = "always"`: every run writes its per-site traces (`{{trace_dir}}` set), and a
    /// failure is localized from the run's own traces instead of re-running the program.
    pub trace_always: bool,
    /// `[engines.NAME.shrink]`: the values `run`'s shrink may lower and their floors (`None`:
    /// the program's failures are not shrunk).
    pub shrink: Option<crate::engine_shrink::ShrinkFloors>,
    pub loc: Loc,
}

impl EngineDef {
    /// The directory of the file that defines this engine: relative paths start there.
    pub fn base_dir(&self) -> std::path::PathBuf {
        self.loc
            .path()
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default()
    }

    pub fn mutation(&self, name: &str) -> Option<&EngineMutation> {
        self.mutations.iter().find(|m| m.name.value == name)
    }

    /// Whether the program sees template value `value`: some template of this engine (its
    /// program, arguments, environment values or working directory) inserts `{{value}}`. Only
    /// an insertion counts, not text (`--no-save_dir` names nothing); a template that does not
    /// parse (refused at validate time) names nothing either.
    pub fn names(&self, value: &str) -> bool {
        let templates = std::iter::once(&self.program)
            .chain(&self.args)
            .chain(self.env.iter().map(|(_, v)| v))
            .chain(self.cwd.as_ref());
        inserts(templates.map(|t| t.value.as_str()), value)
    }

    pub fn decode(
        cx: &mut Ctx<'_>,
        name: Located<String>,
        mut t: Table<'_, '_>,
    ) -> Option<EngineDef> {
        let kind = t.string(cx, "kind");
        match &kind {
            Some(k) if k.value == "command" => {}
            Some(k) => cx.error(
                Diagnostic::error(&k.loc, format!("unknown engine kind `{}`", k.value))
                    .help("the only kind is \"command\" (the built-in burn engine needs no table)"),
            ),
            None => cx.error(
                Diagnostic::error(&t.loc, format!("engine `{}` has no `kind`", name.value))
                    .help("add kind = \"command\""),
            ),
        }
        let program = t.string(cx, "program");
        if program.is_none() {
            cx.error(
                Diagnostic::error(&t.loc, format!("engine `{}` has no `program`", name.value))
                    .help("name the executable, e.g. program = \"python3\""),
            );
        }
        let args = t.strings(cx, "args").map(|a| a.value).unwrap_or_default();
        let shell = t.bool(cx, "shell").is_some_and(|b| b.value);
        let env = string_table(cx, &mut t, "env");
        let defaults = string_table(cx, &mut t, "defaults");
        let cwd = t.string(cx, "cwd");
        let artifacts = t
            .get("artifacts")
            .and_then(|v| Table::from_value(cx, v, format!("engines.{}.artifacts", name.value)))
            .map(|a| artifact_map(cx, a))
            .unwrap_or_else(|| ArtifactMap {
                step_key: "step".into(),
                loss_key: "loss".into(),
                ..ArtifactMap::default()
            });
        let mutations = mutations(cx, &mut t, &name.value);
        let trace_always = trace_mode(cx, &mut t, &name.value, artifacts.trace.is_some());
        let shrink = crate::engine_shrink::decode(cx, &mut t, &name.value);
        let loc = t.loc.clone();
        t.finish(cx);
        let def = EngineDef {
            name,
            program: program?,
            args,
            shell,
            env,
            defaults,
            cwd,
            artifacts,
            mutations,
            trace_always,
            shrink,
            loc,
        };
        checks::check(cx, &def);
        Some(def)
    }
}

/// `trace`: `"rerun"` (the default: the program runs again with `{{trace_dir}}` set to localize
/// a failure) or `"always"` (every run traces), which needs `artifacts.trace`.
fn trace_mode(cx: &mut Ctx<'_>, t: &mut Table<'_, '_>, engine: &str, traces: bool) -> bool {
    let Some(mode) = t.string(cx, "trace") else {
        return false;
    };
    match mode.value.as_str() {
        "rerun" => false,
        "always" if traces => true,
        "always" => {
            cx.error(
                Diagnostic::error(
                    &mode.loc,
                    format!("engine `{engine}` traces always but names no trace directory"),
                )
                .help(
                    "add `trace = \"DIR\"` to its [artifacts]: where the program writes its traces",
                ),
            );
            false
        }
        other => {
            cx.error(
                Diagnostic::error(
                    &mode.loc,
                    format!("`engines.{engine}.trace` is `{other}`: it is \"always\" or \"rerun\""),
                )
                .help("\"always\": every run writes traces; \"rerun\" (default): only a failure's rerun does"),
            );
            false
        }
    }
}

fn inserts<'a>(templates: impl IntoIterator<Item = &'a str>, value: &str) -> bool {
    templates
        .into_iter()
        .filter_map(|t| crate::template::parse(t).ok())
        .any(|pieces| pieces.contains(&crate::template::Piece::Value(value)))
}

#[cfg(test)]
mod tests {
    use super::inserts;

    #[test]
    fn only_an_insertion_names_a_value() {
        assert!(inserts(["--out", "--state={{ state_dir }}"], "state_dir"));
        assert!(inserts(["{{state_dir}}/x"], "state_dir"));
        assert!(!inserts(["--no-state_dir", "state_dir"], "state_dir"));
        assert!(!inserts(["{{state_dirs}}"], "state_dir"));
    }
}
