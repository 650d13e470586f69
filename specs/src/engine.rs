//! `[engines.NAME]`: a user's own training program as an engine. A model that says
//! `engine = "NAME"` is trained by running that program (once at world size 1 for its
//! reference, once per mesh), and judged from the files it writes, mapped to meshparity's
//! artifact names by `[engines.NAME.artifacts]`.
//!
//! `program`, `args`, `env` and `cwd` are handlebars templates over the job's values (mesh
//! degrees, seed, steps, dtype, out_dir, the model's keys...). Without `shell = true` the
//! rendered words are an argv, never parsed by a shell, so no spec value can inject a command.

use crate::decode::{kind_of, Ctx, Table};
use crate::diagnostic::Diagnostic;
use crate::mutation::Needs;
use crate::source::{Loc, Located};

pub const KEYS: &[&str] = &[
    "kind",
    "program",
    "args",
    "shell",
    "env",
    "cwd",
    "artifacts",
    "mutations",
    "trace",
    "shrink",
];
pub const ARTIFACT_KEYS: &[&str] = &[
    "curve",
    "logits",
    "grads",
    "weights",
    "initial",
    // The old name of `initial`, still read (with a warning).
    "checkpoint",
    "roundtrip",
    "trace",
    "digests",
    "optimizer",
    "step_key",
    "loss_key",
    "log",
    "gate",
];
pub const MUTATION_KEYS: &[&str] = &["args", "env", "needs"];

/// Which file of the program's output directory holds each artifact.
#[derive(Clone, Debug, Default)]
pub struct ArtifactMap {
    /// Per-step metrics, JSON Lines.
    pub curve: Option<Located<String>>,
    /// First-step logits (and loss), safetensors.
    pub logits: Option<Located<String>>,
    /// First-step gradients, safetensors.
    pub grads: Option<Located<String>>,
    /// Final weights, safetensors.
    pub weights: Option<Located<String>>,
    /// Initial weights, safetensors: with it the oracle level compares weight updates, without
    /// it the weights themselves (`initial`; it was `checkpoint`, a name the round trip's own
    /// `checkpoint.safetensors` made ambiguous).
    pub initial: Option<Located<String>>,
    /// The reference's seed checkpoint (`{{seed_checkpoint}}`) saved by the program's sharded
    /// saver for this mesh and loaded back, safetensors: the roundtrip level.
    pub roundtrip: Option<Located<String>>,
    /// A directory the program fills with per-site traces when `{{trace_dir}}` is set (for
    /// localizing a failure): `sites.txt` and `step{S}.safetensors` (docs/engines.md).
    pub trace: Option<Located<String>>,
    /// Each rank's digest of every parameter it holds, grouped by the ranks that must hold the
    /// same bytes, JSON (`meshparity_hooks.torch.replica_digests`): a group whose digests
    /// differ fails the oracle level, as the built-in engine's replicas that disagree do.
    pub digests: Option<Located<String>>,
    /// The optimizer's state gathered to world-size-1 shapes, safetensors (tensor names the
    /// program's own, e.g. `exp_avg.NAME`, `step`): written beside `weights` where a
    /// `[[resume]]` pair's run saves (`{{save_dir}}`) and where it loads (`{{loaded_dir}}`), so
    /// the roundtrip level holds the optimizer's state loaded bit-equal to the state saved; and
    /// after `oracle_steps` (`{{state_dir}}`), judged against the reference's there.
    pub optimizer: Option<Located<String>>,
    /// Key of the step number in `curve` (default `step`).
    pub step_key: String,
    /// Key of the loss in `curve` (default `loss`).
    pub loss_key: String,
    /// Read the loss curve from the program's log instead: a preset (`megatron`, `torchtitan`,
    /// `pithtrain`) or a regex with named groups `step` and `loss`.
    pub log: Option<Located<String>>,
    /// Metrics of `curve` gated beside the loss, each by the curve level's limits
    /// (`grad_norm` by its own, and gated by default when the curve has it). Any other metric
    /// that is no performance figure is left out of the comparison, and the level says so.
    pub gate: Vec<Located<String>>,
}

/// The curve metric gated by default when a program logs it: NeMo's parity tests found the
/// gradient norm the most sensitive curve metric, and a norm over the wrong ranks changes it
/// where clipping leaves the loss alone.
pub const DEFAULT_GATED: &str = "grad_norm";

impl ArtifactMap {
    /// Whether curve metric `name` is gated beside the loss.
    pub fn gated(&self, name: &str) -> bool {
        name == DEFAULT_GATED || self.gate.iter().any(|g| g.value == name)
    }

    /// The `artifacts` keys a run of this engine must map for `level`, that it does not: the
    /// mesh run's side (`reference` false) or the world-size-1 reference's; `resumed`: the
    /// mesh is a `[[resume]]` pair's, whose round trip is the state saved against the state
    /// loaded (the weights at least; the optimizer's state where mapped).
    pub fn unmapped(
        &self,
        level: crate::Level,
        reference: bool,
        resumed: bool,
    ) -> Vec<&'static str> {
        use crate::Level;
        let need: &[(&'static str, bool)] = match level {
            Level::Roundtrip if resumed && reference => &[],
            Level::Roundtrip if resumed => &[("weights", self.weights.is_some())],
            // The reference writes the initial weights; a mesh run saves and loads them back.
            Level::Roundtrip if reference => &[("initial", self.initial.is_some())],
            Level::Roundtrip => &[("roundtrip", self.roundtrip.is_some())],
            Level::Forward => &[("logits", self.logits.is_some())],
            Level::Curve => &[("curve", self.curve.is_some() || self.log.is_some())],
            Level::Oracle => &[
                ("grads", self.grads.is_some()),
                ("weights", self.weights.is_some()),
            ],
            Level::Routing => &[("routing", false)],
        };
        need.iter().filter(|(_, ok)| !ok).map(|(k, _)| *k).collect()
    }
}

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
}

impl EngineMutation {
    /// Whether the bug exists on `mesh` under `training`: a bug of the resumption (`needs =
    /// ["resume"]`) only on a `[[resume]]` pair's mesh, every other bug only elsewhere (the
    /// catalog's rule, [`crate::Mutation::applies_to`]).
    pub fn applies_to(&self, mesh: &crate::MeshConfig, training: &crate::Training) -> bool {
        training.resume.is_some() == self.needs.contains(&Needs::Resume)
            && self.needs.iter().all(|n| match n {
                Needs::Adamw => training.optimizer == crate::Optimizer::Adamw,
                n => n.holds(mesh),
            })
    }
}

/// A command engine as written.
#[derive(Clone, Debug)]
pub struct EngineDef {
    pub name: Located<String>,
    pub program: Located<String>,
    pub args: Vec<Located<String>>,
    /// Run `program` (and the args) through `sh -c`, values shell-quoted.
    pub shell: bool,
    pub env: Vec<(String, Located<String>)>,
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
            cwd,
            artifacts,
            mutations,
            trace_always,
            shrink,
            loc,
        };
        crate::engine_checks::check(cx, &def);
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

fn artifact_map(cx: &mut Ctx<'_>, mut t: Table<'_, '_>) -> ArtifactMap {
    let step_key = t.string(cx, "step_key").map_or("step".into(), |s| s.value);
    let loss_key = t.string(cx, "loss_key").map_or("loss".into(), |s| s.value);
    let gate = gate(cx, &mut t, [&step_key, &loss_key]);
    let map = ArtifactMap {
        curve: t.string(cx, "curve"),
        logits: t.string(cx, "logits"),
        grads: t.string(cx, "grads"),
        weights: t.string(cx, "weights"),
        initial: initial(cx, &mut t),
        roundtrip: t.string(cx, "roundtrip"),
        trace: t.string(cx, "trace"),
        digests: t.string(cx, "digests"),
        optimizer: t.string(cx, "optimizer"),
        step_key,
        loss_key,
        log: t.string(cx, "log"),
        gate,
    };
    t.finish(cx);
    map
}

/// `gate`: metric names of the curve, none of them the step or the loss (which is gated
/// anyway) and none twice.
fn gate(
    cx: &mut Ctx<'_>,
    t: &mut Table<'_, '_>,
    [step_key, loss_key]: [&str; 2],
) -> Vec<Located<String>> {
    let Some(list) = t.strings(cx, "gate") else {
        return Vec::new();
    };
    let mut out: Vec<Located<String>> = Vec::new();
    for name in list.value {
        let why = if name.value.is_empty() {
            Some("an empty metric name".to_owned())
        } else if name.value == step_key || name.value == "step" {
            Some(format!(
                "`{}` numbers the steps; it is not a metric",
                name.value
            ))
        } else if name.value == loss_key || name.value == "loss" {
            Some(format!("`{}` is the loss, gated anyway", name.value))
        } else if crate::performance::is_performance(&name.value) {
            Some(format!(
                "`{}` is a performance figure (a time, memory or rate): meshparity reports \
                 those side by side and never gates them",
                name.value
            ))
        } else if out.iter().any(|o| o.value == name.value) {
            Some(format!("`{}` is listed twice", name.value))
        } else {
            None
        };
        match why {
            Some(why) => cx.error(
                Diagnostic::error(&name.loc, format!("artifacts.gate: {why}")).help(
                    "list the curve's metrics to gate beside the loss, e.g. gate = [\"grad_norm\"]",
                ),
            ),
            None => out.push(name),
        }
    }
    out
}

/// `initial`, or its old name `checkpoint` with a warning to rename it; not both.
fn initial(cx: &mut Ctx<'_>, t: &mut Table<'_, '_>) -> Option<Located<String>> {
    let new = t.string(cx, "initial");
    let Some(old) = t.string(cx, "checkpoint") else {
        return new;
    };
    if let Some(new) = new {
        cx.error(
            Diagnostic::error(
                &old.loc,
                "`checkpoint` and `initial` both name the initial weights",
            )
            .help("keep `initial` (`checkpoint` is its old name)")
            .related("`initial` here", &new.loc),
        );
        return Some(new);
    }
    cx.error(
        Diagnostic::warning(
            &old.loc,
            "`artifacts.checkpoint` is now `artifacts.initial`",
        )
        .help("rename the key: the initial weights; the round trip's file is `roundtrip`"),
    );
    Some(old)
}

/// A table of string values (`env`).
pub(crate) fn string_table(
    cx: &mut Ctx<'_>,
    t: &mut Table<'_, '_>,
    key: &'static str,
) -> Vec<(String, Located<String>)> {
    let path = format!("{}.{key}", t.path);
    let Some(v) = t.get(key) else {
        return Vec::new();
    };
    let Some(mut table) = Table::from_value(cx, v, path.clone()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in table.entries() {
        match v.get_ref().as_str() {
            Some(s) => out.push((
                k.get_ref().to_string(),
                Located::new(s.to_owned(), cx.loc(v)),
            )),
            None => cx.error(Diagnostic::error(
                &cx.loc(v),
                format!(
                    "`{path}.{}` must be a string, found {}",
                    k.get_ref(),
                    kind_of(v.get_ref())
                ),
            )),
        }
    }
    out
}

/// `[engines.NAME.mutations]`: `bug = ["--bug", "x"]` or `bug = { args, env, needs }`.
fn mutations(cx: &mut Ctx<'_>, t: &mut Table<'_, '_>, engine: &str) -> Vec<EngineMutation> {
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
        };
        if v.get_ref().as_array().is_some() {
            m.args = words(cx, v, &here);
        } else if let Some(mut mt) = Table::from_value(cx, v, here.clone()) {
            if let Some(a) = mt.get("args") {
                m.args = words(cx, a, &format!("{here}.args"));
            }
            m.env = string_table(cx, &mut mt, "env");
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
