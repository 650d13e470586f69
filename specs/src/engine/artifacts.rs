//! `[engines.NAME.artifacts]`: which file of the program's output directory holds each
//! artifact a level reads, and which curve metrics are gated beside the loss.

use crate::decode::{Ctx, Table};
use crate::diagnostic::Diagnostic;
use crate::source::Located;

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
    "inputs",
    "optimizer",
    "step_key",
    "loss_key",
    "log",
    "gate",
];
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
    /// The rows each rank trained on, per step, as digests, JSON Lines
    /// (`meshparity_hooks.inputs`; the format is `meshparity_engine::inputs`'s): held to the
    /// reference's by the forward (first step), curve and oracle levels, so a data loader
    /// whose position or sampler is wrong (a resumption that restarts the data) is named as such.
    pub inputs: Option<Located<String>>,
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
            // The per-site gate reads the traces the program writes when `{{trace_dir}}` is set.
            Level::Trace => &[("trace", self.trace.is_some())],
        };
        need.iter().filter(|(_, ok)| !ok).map(|(k, _)| *k).collect()
    }
}

pub(super) fn artifact_map(cx: &mut Ctx<'_>, mut t: Table<'_, '_>) -> ArtifactMap {
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
        inputs: t.string(cx, "inputs"),
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
