//! A mesh run's artifacts: train the mesh once (with an injected fault, if asked), merge each
//! rank's tensors to world-size-1 names and write what the levels asked for need. Replicas
//! that disagree cannot be merged: the manifest says so and the judge fails that artifact.

use std::path::Path;
use std::time::Instant;

use meshparity_engine::optimizer::step;
use meshparity_engine::{checkpoint, files, Length, Manifest};
use meshparity_specs::MeshConfig;

use super::reference::write_trained;
use super::{io, save, LevelError, Setup};
use crate::parallel::fault::SaveFault;
use crate::parallel::zero::Sharded;
use crate::parallel::{Fault, Topology};
use crate::sharding::{Placement, ShardingPlan, Shards};
use crate::train;

/// Whether a mesh run also does the roundtrip level's conversion, and of which seed checkpoint.
#[derive(Clone, Copy, Debug)]
pub enum Roundtrip<'a> {
    No,
    /// The reference's `seed.safetensors` in this directory.
    Reference(&'a Path),
    /// The same checkpoint made here from the seed (a mesh training beside its reference).
    OwnSeed,
}

/// Train `mesh` for `len` and write its artifacts; with a `conversion`, also convert a seed
/// checkpoint to this mesh's shards and back (the roundtrip level). `probe` has the fault to
/// inject, whether to trace the first steps (the trace level's files, written beside the
/// rest) and the reference's routing (moe), replayed.
pub fn run(
    setup: &Setup<'_>,
    mesh: &MeshConfig,
    len: Length,
    probe: train::Probe<'_>,
    conversion: Roundtrip<'_>,
    out: &Path,
) -> Result<Manifest, LevelError> {
    let fault = probe.fault;
    std::fs::create_dir_all(out).map_err(io(out))?;
    let start = Instant::now();
    let plan = ShardingPlan::llama(setup.model, mesh);
    let mut manifest = setup.manifest(mesh.world_size());
    let mut written = Vec::new();
    let mut altered = Vec::new();
    let seed = match conversion {
        Roundtrip::No => None,
        Roundtrip::Reference(dir) => Some(checkpoint::load(&dir.join(files::SEED))?),
        Roundtrip::OwnSeed => Some(train::seed_checkpoint(
            setup.model,
            setup.training.seed,
            setup.device,
            setup.burn_dtype(),
        )),
    };
    if let Some(seed) = seed {
        let save_fault = fault.and_then(Fault::save).filter(|_| mesh.tp > 1);
        let back = roundtrip(&plan, &seed, out, save_fault)?;
        if let Some(f) = save_fault {
            altered.push(format!("checkpoint.save: {}", f.as_str()));
        }
        match plan.merge(&back) {
            Ok(mut full) => {
                if save_fault == Some(SaveFault::DuplicateReplicated) {
                    duplicate_replicated(&plan, &back, &mut full);
                }
                save(out, files::CHECKPOINT, &full, &mut written)?;
            }
            Err(e) => {
                let why = e.to_string();
                manifest.unmerged.insert(files::CHECKPOINT.to_owned(), why);
            }
        }
    }
    if len.steps > 0 {
        let mut rec = train::mesh(
            setup.model,
            mesh,
            setup.training,
            len,
            probe,
            setup.device,
            setup.burn_dtype(),
        )?;
        if probe.trace {
            let trace = std::mem::take(&mut rec.trace);
            super::trace::write(out, mesh.microbatches as usize, trace)?;
            written.extend([files::TRACE.to_owned(), files::TRACE_INDEX.to_owned()]);
        }
        let plans = Plans {
            grads: &plan,
            weights: &plan,
        };
        // A plain mesh takes its rows from the batch its own step numbers: only a resumed
        // run's data position is restored from elsewhere, so only its inputs are judged.
        rec.inputs.clear();
        write_record(setup, rec, len, plans, out, &mut written, &mut manifest)?;
        altered.append(&mut manifest.altered);
    }
    manifest.altered = altered;
    manifest.artifacts = written;
    manifest.seconds = start.elapsed().as_secs_f64();
    manifest.write(out)?;
    Ok(manifest)
}

/// The sharding plans a run's recorded tensors merge by: a resumed run's first gradients come
/// from its first mesh, its weights from whichever mesh recorded them.
#[derive(Clone, Copy)]
pub(super) struct Plans<'p> {
    pub grads: &'p ShardingPlan,
    pub weights: &'p ShardingPlan,
}

/// Write what a training recorded (forward, curve, merged gradients and weights) and what its
/// manifest says of it; its altered sites go into `manifest.altered`.
pub(super) fn write_record(
    setup: &Setup<'_>,
    rec: train::Record,
    len: Length,
    plans: Plans<'_>,
    out: &Path,
    written: &mut Vec<String>,
    manifest: &mut Manifest,
) -> Result<(), LevelError> {
    write_trained(setup, out, &rec, written)?;
    if len.backward {
        let tolerance = if setup.repeatable {
            0.0
        } else {
            super::GPU_NORM_AGREEMENT
        };
        if let Some(why) = super::reference::norms_disagree(&rec.rank_norms, tolerance) {
            manifest.unmerged.insert(files::GRADS.to_owned(), why);
        } else {
            let to = (out, files::GRADS);
            merged(plans.grads, &rec.grads, to, written, manifest, |full| {
                super::reference::with_norm(full, &rec)
            })?;
        }
    }
    if let Some(w) = &rec.weights {
        let to = (out, files::WEIGHTS);
        merged(plans.weights, w, to, written, manifest, |_| {})?;
    }
    if let Some(o) = &rec.optimizer_step {
        write_optimizer_step(plans.weights, o, out, written, manifest)?;
    }
    // The logits and loss of a run whose TP ranks computed different losses stand for none
    // of them: the forward level reports the disagreement, as a merge of unequal replicas.
    if let Some(why) = rec.divergent.first() {
        manifest
            .unmerged
            .insert(files::FORWARD.to_owned(), why.clone());
    }
    if let Some(why) = &rec.unsharded_stale {
        manifest
            .unmerged
            .insert(files::WEIGHTS.to_owned(), why.clone());
    }
    manifest.steps = rec.losses.len();
    manifest.collectives = rec.collectives;
    manifest.activation_bytes = rec.activation_bytes;
    manifest.altered.extend(rec.altered);
    manifest.anomalies = rec.anomalies;
    Ok(())
}

/// The oracle's last update as the mesh's optimizers took it, merged to world-size-1 names
/// ([`files::OPTIMIZER_STEP`]); replicas that disagree are recorded in the manifest.
fn write_optimizer_step(
    plan: &ShardingPlan,
    o: &train::OptimizerStep,
    out: &Path,
    written: &mut Vec<String>,
    manifest: &mut Manifest,
) -> Result<(), LevelError> {
    let merged = (|| {
        Ok::<_, crate::sharding::MergeError>((
            plan.merge(&o.grads)?,
            train::state::merge(plan, &o.before)?,
            train::state::merge(plan, &o.after)?,
        ))
    })();
    match merged {
        Ok((grads, before, after)) => {
            let step = step::entries(o.step, &grads, &before, &after);
            save(out, files::OPTIMIZER_STEP, &step, written)
        }
        Err(e) => {
            let why = e.to_string();
            manifest
                .unmerged
                .insert(files::OPTIMIZER_STEP.to_owned(), why);
            Ok(())
        }
    }
}

/// Merge per-rank tensors, `add` what goes beside them, and save them as `file`; replicas that
/// disagree are recorded in the manifest, not an error.
fn merged(
    plan: &ShardingPlan,
    ranks: &[Shards],
    (out, file): (&Path, &str),
    written: &mut Vec<String>,
    manifest: &mut Manifest,
    add: impl FnOnce(&mut Shards),
) -> Result<(), LevelError> {
    match plan.merge(ranks) {
        Ok(mut full) => {
            add(&mut full);
            save(out, file, &full, written)
        }
        Err(e) => {
            manifest.unmerged.insert(file.to_owned(), e.to_string());
            Ok(())
        }
    }
}

/// The seed checkpoint → per-rank shard files → read back (with a save fault, saved wrongly).
fn roundtrip(
    plan: &ShardingPlan,
    seed: &Shards,
    out: &Path,
    fault: Option<SaveFault>,
) -> Result<Vec<Shards>, LevelError> {
    let dir = out.join(files::SHARDS);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let whole = plan.shard(seed);
    // A ZeRO-3 mesh saves what each rank holds: its flat shards.
    let topo = Topology::new(&plan.mesh);
    let fsdp = Sharded::of(&topo).filter(|z| z.stage() == 3);
    let saved = match fsdp {
        Some(z) => z.flatten_checkpoint(&whole),
        None => whole.clone(),
    };
    let mut back = Vec::new();
    for (rank, mut shards) in saved.into_iter().enumerate() {
        if fault == Some(SaveFault::DropTpShards) && plan.coord(rank).tp > 0 {
            shards.retain(|name, _| {
                plan.rules
                    .iter()
                    .any(|r| r.name == *name && r.placement == Placement::Replicated)
            });
        }
        let shards = &shards;
        let path = dir.join(format!("rank-{rank:05}.safetensors"));
        checkpoint::save(&path, shards).map_err(io(&path))?;
        back.push(checkpoint::load(&path)?);
    }
    Ok(match fsdp {
        Some(z) => z.merge_checkpoint(&back, &whole),
        None => back,
    })
}

/// What loading a checkpoint whose replicated tensors were saved as TP shards yields: every TP
/// rank's copy concatenated.
fn duplicate_replicated(plan: &ShardingPlan, ranks: &[Shards], full: &mut Shards) {
    let tp = plan.mesh.tp as usize;
    for r in plan
        .rules
        .iter()
        .filter(|r| r.placement == Placement::Replicated)
    {
        let copies: Vec<_> = ranks
            .iter()
            .enumerate()
            .filter(|(rank, _)| {
                let c = plan.coord(*rank);
                r.on_stage(c.pp) && c.dp == 0
            })
            .filter_map(|(_, s)| s.get(&r.name).cloned())
            .take(tp)
            .collect();
        if copies.len() == tp {
            full.insert(
                r.name.clone(),
                meshparity_engine::HostTensor::concat(&copies, 0),
            );
        }
    }
}
