//! Whether a mesh's degrees divide a model's shapes.
//!
//! Each rule is the reason a real framework would refuse the layout: Megatron cannot split 4
//! heads over tp3, nor 3 layers over pp2.

use crate::family::Family;
use crate::mesh::Mesh;
use crate::model::Model;
use crate::run::RunSettings;
use crate::source::Loc;

/// One broken rule: what failed, the mesh value and the model (or run) value to point at.
pub struct Misfit {
    pub message: String,
    pub help: &'static str,
    pub mesh_loc: Loc,
    pub other_loc: Loc,
    pub other_what: &'static str,
}

pub fn check(model: &Model, mesh: &Mesh, run: &RunSettings) -> Vec<Misfit> {
    if model.engine.is_some() {
        // A user's program has its own shapes and refuses its own misfits.
        return Vec::new();
    }
    let mut r = Rules::default();
    tensor_parallel(&mut r, model, mesh);
    sequence_parallel(&mut r, model, mesh);
    pipeline(&mut r, model, mesh);
    context_parallel(&mut r, model, mesh, run);
    experts(&mut r, model, mesh);
    batch(&mut r, mesh, run);
    r.out
}

/// The broken rules found so far.
#[derive(Default)]
struct Rules {
    out: Vec<Misfit>,
}

impl Rules {
    /// Unless `ok`: the rule `message` (with `help`) is broken, at the mesh's value and the
    /// model's or run's (`other_what`).
    fn rule(
        &mut self,
        ok: bool,
        message: String,
        help: &'static str,
        mesh_loc: &Loc,
        other_loc: &Loc,
        other_what: &'static str,
    ) {
        if !ok {
            self.out.push(Misfit {
                message,
                help,
                mesh_loc: mesh_loc.clone(),
                other_loc: other_loc.clone(),
                other_what,
            });
        }
    }
}

fn divides(n: u32, d: u32) -> bool {
    n.is_multiple_of(d)
}

/// Heads, kv heads and the MLPs split evenly over tp.
fn tensor_parallel(r: &mut Rules, model: &Model, mesh: &Mesh) {
    let tp = mesh.tp.value;
    for (what, field) in [
        ("heads", &model.heads),
        ("kv_heads", &model.kv_heads),
        ("ffn", &model.ffn),
    ] {
        r.rule(
            divides(field.value, tp),
            format!("{what} ({}) is not divisible by tp ({tp})", field.value),
            "tensor parallelism splits heads and the MLP evenly across tp ranks (a vocabulary is padded instead)",
            &mesh.tp.loc,
            &field.loc,
            "model",
        );
    }
    // The shared expert is a tensor-parallel MLP like the dense one.
    if let Some(shared) = &model.shared_expert_ffn {
        r.rule(
            divides(shared.value, tp),
            format!(
                "shared_expert_ffn ({}) is not divisible by tp ({tp})",
                shared.value
            ),
            "the shared expert is split across tp ranks like the dense MLP",
            &mesh.tp.loc,
            &shared.loc,
            "model",
        );
    }
}

/// Under SP each cp rank's part of the sequence splits over tp.
fn sequence_parallel(r: &mut Rules, model: &Model, mesh: &Mesh) {
    let tp = mesh.tp.value;
    let cp = mesh.cp.value;
    if mesh.sp.value {
        let (shards, of) = if cp > 1 {
            (tp * cp, format!("tp × cp ({tp} × {cp})"))
        } else {
            (tp, format!("tp ({tp})"))
        };
        r.rule(
            divides(model.seq_len.value, shards),
            format!(
                "seq_len ({}) is not divisible by {of} under sequence parallelism",
                model.seq_len.value
            ),
            "SP shards each cp rank's part of the sequence across the tp ranks",
            &mesh.sp.loc,
            &model.seq_len.loc,
            "model",
        );
    }
}

/// Layers split evenly over the pipeline's (virtual) stages.
fn pipeline(r: &mut Rules, model: &Model, mesh: &Mesh) {
    // Under the interleaved schedule the layers split over pp·virtual_stages chunks.
    let (pp, virtual_pp) = (mesh.pp.value, mesh.config().virtual_pp());
    let (over, help, at) = if virtual_pp == pp {
        (
            format!("pp ({pp})"),
            "pipeline stages hold equal numbers of layers",
            &mesh.pp.loc,
        )
    } else {
        (
            format!(
                "pp·virtual_stages ({pp}·{} = {virtual_pp})",
                virtual_pp / pp
            ),
            "virtual pipeline stages hold equal numbers of layers",
            if mesh.virtual_stages.value > 0 {
                &mesh.virtual_stages.loc
            } else {
                &mesh.schedule.loc
            },
        )
    };
    r.rule(
        divides(model.layers.value, virtual_pp),
        format!("layers ({}) is not divisible by {over}", model.layers.value),
        help,
        at,
        &model.layers.loc,
        "model",
    );
}

/// CP's 2·cp chunks of every sequence, and of every padded document.
fn context_parallel(r: &mut Rules, model: &Model, mesh: &Mesh, run: &RunSettings) {
    let cp = mesh.cp.value;
    let chunks = if cp > 1 { 2 * cp } else { 1 };
    r.rule(
        divides(model.seq_len.value, chunks),
        format!(
            "seq_len ({}) is not divisible by 2 × cp ({chunks})",
            model.seq_len.value
        ),
        "context parallelism cuts every sequence into 2·cp equal chunks, rank c holding chunks c and 2·cp−1−c (causal load balancing)",
        &mesh.cp.loc,
        &model.seq_len.loc,
        "model",
    );
    // The THD layout cuts each padded document into 2·cp chunks: every document boundary and
    // the row's end must fall on the padding's multiple, and the multiple on 2·cp.
    if let Some(pad) = &run.padding {
        r.rule(
            divides(pad.value, chunks),
            format!(
                "pad_documents_to ({}) is not divisible by 2 × cp ({chunks})",
                pad.value
            ),
            "with padded documents context parallelism cuts every document into 2·cp equal chunks (TransformerEngine's THD layout); pad to a multiple of 2·cp for every mesh",
            &mesh.cp.loc,
            &pad.loc,
            "run",
        );
        r.rule(
            divides(model.seq_len.value, pad.value),
            format!(
                "seq_len ({}) is not divisible by pad_documents_to ({})",
                model.seq_len.value, pad.value
            ),
            "padded documents tile each row: the row's length must be a multiple of the padding",
            &pad.loc,
            &model.seq_len.loc,
            "model",
        );
    }
}

/// Experts over ep, each expert's MLP over etp; expert parallelism only for the moe family.
fn experts(r: &mut Rules, model: &Model, mesh: &Mesh) {
    let tp = mesh.tp.value;
    match (&model.experts, model.family.value) {
        (Some(experts), Family::Moe) => {
            r.rule(
                divides(experts.value, mesh.ep.value),
                format!(
                    "experts ({}) is not divisible by ep ({})",
                    experts.value, mesh.ep.value
                ),
                "expert parallelism places an equal number of experts on each ep rank",
                &mesh.ep.loc,
                &experts.loc,
                "model",
            );
            r.rule(
                mesh.ep.value * mesh.etp.value == 1 || tp == 1 || mesh.sp.value,
                format!(
                    "expert parallelism (ep·etp = {}) with tp = {tp} needs sequence parallelism",
                    mesh.ep.value * mesh.etp.value
                ),
                "set `sp = true` on this mesh: as in Megatron, MoE with tensor and expert parallelism dispatches each rank's own sequence shard, so no token is sent twice",
                &mesh.ep.loc,
                &model.family.loc,
                "model",
            );
            r.rule(
                divides(model.ffn.value, mesh.etp.value),
                format!(
                    "ffn ({}) is not divisible by etp ({})",
                    model.ffn.value, mesh.etp.value
                ),
                "expert tensor parallelism splits each expert's MLP across etp ranks",
                &mesh.etp.loc,
                &model.ffn.loc,
                "model",
            );
        }
        _ => {
            for (what, d) in [("ep", &mesh.ep), ("etp", &mesh.etp)] {
                r.rule(
                    d.value == 1,
                    format!(
                        "{what} = {} needs experts, but model family is `{}`",
                        d.value,
                        model.family.value.as_str()
                    ),
                    "expert parallelism only applies to family `moe`",
                    &d.loc,
                    &model.family.loc,
                    "model",
                );
            }
        }
    }
}

/// The batch in equal microbatches on every dp rank.
fn batch(r: &mut Rules, mesh: &Mesh, run: &RunSettings) {
    let per_step = u64::from(mesh.dp.value) * u64::from(mesh.microbatches.value);
    r.rule(
        u64::from(run.batch.value) % per_step == 0,
        format!(
            "batch ({}) is not divisible by dp·microbatches ({}·{} = {per_step})",
            run.batch.value, mesh.dp.value, mesh.microbatches.value
        ),
        "every dp rank runs the same number of equal microbatches; change [run] batch or the mesh",
        if mesh.dp.value > 1 {
            &mesh.dp.loc
        } else {
            &mesh.microbatches.loc
        },
        &run.batch.loc,
        "run",
    );
}
