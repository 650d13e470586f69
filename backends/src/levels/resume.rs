//! A `[[resume]]` pair's run: the first mesh trains to the checkpoint step and saves its state
//! sharded in its own layout ([`meshparity_engine::sharded`]); the state is read back whole
//! from the index alone, split for the second mesh, loaded there, and the second mesh trains
//! on. The run's artifacts are the uninterrupted run's (curve over every step, weights after
//! `oracle_steps`), judged against the reference as any mesh's; beside them the state the
//! first mesh held (`RESUME_SAVED`) and the state the second loaded, merged back
//! (`CHECKPOINT`), which the roundtrip level holds bit-equal.

use std::path::Path;
use std::time::Instant;

use meshparity_engine::{files, sharded, Length, Manifest};
use meshparity_specs::{MeshConfig, ResumeFrom};

use super::run::{write_record, Plans};
use super::{io, save, LevelError, Setup};
use crate::host::HostTensor;
use crate::llama::is_buffer;
use crate::parallel::fault::ResumeFault;
use crate::parallel::Fault;
use crate::sharding::{ShardingPlan, Shards};
use crate::train::{self, state, Record, RunError, Span, Start};

/// Train `from` to its checkpoint, resume on `mesh`, and write the artifacts.
pub fn resumed(
    setup: &Setup<'_>,
    mesh: &MeshConfig,
    from: &ResumeFrom,
    len: Length,
    fault: Option<Fault>,
    replay: Option<&train::Replay>,
    out: &Path,
) -> Result<Manifest, LevelError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    let start = Instant::now();
    let at = (from.at as usize).min(len.steps);
    let (first, second) = (
        ShardingPlan::llama(setup.model, &from.config),
        ShardingPlan::llama(setup.model, mesh),
    );
    let mut manifest = setup.manifest(mesh.world_size());
    let mut written = Vec::new();
    let bug = fault.and_then(Fault::resume);
    let probe = train::Probe {
        fault,
        replay,
        ..Default::default()
    };
    let last = [len.weights_after as u32];
    let keep = keeps(&last, at);
    let last = last[0];
    let segment = |mesh: &MeshConfig, start: Start<'_>, steps, save, keep| {
        setup.segment(mesh, Span::new(len, start, steps, save, keep), probe)
    };
    // The first mesh, to the checkpoint.
    let a = segment(&from.config, Start::Seed, 0..at, true, keep[0])?;
    let held = a.state.expect("a segment asked to save keeps its state");
    let mut saved = Saved {
        out,
        written: &mut written,
        manifest: &mut manifest,
    };
    let what = format!("the state `{}` saved", from.mesh);
    saved.merged(&first, &held, files::RESUME_SAVED, &what)?;
    let dir = out.join(files::RESUME_CHECKPOINT);
    save_sharded(&first, held, bug, &dir)?;
    // Read back whole from the index, then loaded by the second mesh.
    let loaded = load([&first, &second], &dir, bug, setup)?;
    let ranks = state::split(&second, &loaded);
    let b = segment(mesh, Start::State(&ranks), at..at, true, &[])?;
    let state = b.state.expect("a segment asked to save keeps its state");
    let what = "the state the second mesh loaded";
    saved.merged(&second, &state, files::CHECKPOINT, what)?;
    // The second mesh trains on.
    let mut rec = a.record.ok_or(RunError::ResumeUntrained)?;
    let rest = match len.steps > at {
        true => segment(mesh, Start::State(&ranks), at..len.steps, false, keep[1])?.record,
        false => None,
    };
    // The weights are the second mesh's where it trained to them.
    let second_weights = rest.as_ref().is_some_and(|r| r.weights.is_some());
    let weights = if second_weights { &second } else { &first };
    if let Some(next) = rest {
        rec = join(rec, next);
    }
    if let Some((step, ranks)) = rec.states.iter().find(|(s, _)| *s == last) {
        let plan = [&first, &second][usize::from(*step as usize > at)];
        let what = format!("the state after step {step}");
        saved.merged(plan, ranks, &files::state_at(*step), &what)?;
    }
    let plans = Plans {
        grads: &first,
        weights,
    };
    write_record(setup, rec, len, plans, out, &mut written, &mut manifest)?;
    if let Some(bug) = bug {
        let said = format!("resume: {}", bug.as_str());
        manifest.altered.insert(0, said);
    }
    manifest.artifacts = written;
    manifest.seconds = start.elapsed().as_secs_f64();
    manifest.write(out)?;
    Ok(manifest)
}

/// The steps after which each mesh keeps its state: the final state (after `oracle_steps`,
/// `last`), which the oracle level judges beside the weights, is kept by whichever mesh trains
/// that step (none at 0).
fn keeps(last: &[u32; 1], at: usize) -> [&[u32]; 2] {
    match last[0] {
        0 => [&[], &[]],
        n if n as usize <= at => [last, &[]],
        _ => [&[], last],
    }
}

/// Where a resumed run's whole states go: saved, or why one does not merge in the manifest
/// (the judge then says it).
struct Saved<'a> {
    out: &'a Path,
    written: &'a mut Vec<String>,
    manifest: &'a mut Manifest,
}

impl Saved<'_> {
    /// `ranks`' state (`what`) merged whole by `plan` and saved as `file`.
    fn merged(
        &mut self,
        plan: &ShardingPlan,
        ranks: &[Shards],
        file: &str,
        what: &str,
    ) -> Result<(), LevelError> {
        match state::merge(plan, ranks) {
            Ok(full) => save(self.out, file, &full, self.written),
            Err(e) => {
                let why = format!("{what}: {e}");
                self.manifest.unmerged.insert(file.to_owned(), why);
                Ok(())
            }
        }
    }
}

/// Every rank's state written as the sharded checkpoint (a saver that leaves out the router's
/// bias buffer, with that bug).
fn save_sharded(
    plan: &ShardingPlan,
    mut ranks: Vec<Shards>,
    bug: Option<ResumeFault>,
    dir: &Path,
) -> Result<(), LevelError> {
    if bug == Some(ResumeFault::ExpertBiasNotSaved) {
        for r in &mut ranks {
            r.retain(|name, _| !is_buffer(name));
        }
    }
    let slice = |rank: usize, name: &str| state::slice(plan, rank, name);
    let shape = |name: &str, t: &crate::host::HostTensor| state::full_shape(plan, name, t);
    sharded::write(dir, &ranks, slice, shape).map_err(|source| {
        LevelError::Run(RunError::Checkpoint {
            action: "saving",
            source,
        })
    })
}

/// The checkpoint in `dir`, whole, as the second mesh's loader makes of it: strict (every
/// parameter and buffer present), or with a resumption bug, wrong as that bug is.
fn load(
    [first, plan]: [&ShardingPlan; 2],
    dir: &Path,
    bug: Option<ResumeFault>,
    setup: &Setup<'_>,
) -> Result<Shards, LevelError> {
    let mut full = sharded::read(dir).map_err(|source| RunError::Checkpoint {
        action: "loading",
        source,
    })?;
    let zero = |full: &mut Shards, names: &[&str]| {
        for name in names {
            if let Some(t) = full.get_mut(*name) {
                t.bytes = 0u64.to_le_bytes().to_vec();
            }
        }
    };
    match bug {
        Some(ResumeFault::MomentsDropped) => full.retain(|name, _| {
            !name.starts_with(state::EXP_AVG) && !name.starts_with(state::EXP_AVG_SQ)
        }),
        Some(ResumeFault::StepReset) => zero(&mut full, &[state::STEP, state::SCHEDULE]),
        Some(ResumeFault::DataPositionReset) => zero(&mut full, &[state::DATA]),
        Some(ResumeFault::RngStreamReset) => zero(&mut full, &[state::RNG]),
        // A load that is not strict: what the checkpoint lacks keeps its initial value.
        Some(ResumeFault::ExpertBiasNotSaved) => {
            let (model, seed) = (setup.model, setup.training.seed);
            let init = train::seed_checkpoint(model, seed, setup.device, setup.burn_dtype());
            for (name, t) in init {
                full.entry(name).or_insert(t);
            }
        }
        Some(ResumeFault::ExpertsByLocalIndex) => by_local_index(plan, &mut full),
        Some(ResumeFault::TpShardWrongAxis) => joined_on_dim0(first, &mut full),
        Some(ResumeFault::Fc1SplitUnchunked) => {
            fc1_split_unchunked(plan.mesh.tp as usize, &mut full)
        }
        None => {}
    }
    if let Some(name) = state::missing(plan, &full) {
        return Err(RunError::Missing(name.to_owned()).into());
    }
    Ok(full)
}

/// Every expert entry as a loader that fetches each EP rank's experts by their local index
/// finds it: expert X holds expert X mod (experts / ep), so every EP rank gets the first
/// rank's experts (and their moments).
fn by_local_index(plan: &ShardingPlan, full: &mut Shards) {
    const EXPERTS: &str = ".mlp.experts.";
    let per = plan.experts_per_layer / (plan.mesh.ep as usize).max(1);
    let local = |name: &str| -> Option<String> {
        let at = name.find(EXPERTS)? + EXPERTS.len();
        let (head, rest) = name.split_at(at);
        let (x, tail) = rest.split_once('.')?;
        let x: usize = x.parse().ok()?;
        Some(format!("{head}{}.{tail}", x % per.max(1)))
    };
    let fetched: Vec<(String, crate::host::HostTensor)> = full
        .keys()
        .filter_map(|n| Some((n.clone(), full.get(&local(n)?)?.clone())))
        .collect();
    full.extend(fetched);
}

/// Every tensor the first mesh split over tp along a dim other than 0, as a loader that joins
/// the saved shards along dim 0 and views the result whole makes of it: the same bytes,
/// shard after shard, under the whole shape.
fn joined_on_dim0(first: &ShardingPlan, full: &mut Shards) {
    let tp = first.mesh.tp as usize;
    for (name, t) in full.iter_mut() {
        let param = state::param_of(name);
        let Some(rule) = first.rules.iter().find(|r| r.name == param) else {
            continue;
        };
        let crate::sharding::Placement::Split(dim) = rule.placement else {
            continue;
        };
        if dim == 0 || dim >= t.shape.len() || !t.shape[dim].is_multiple_of(tp) {
            continue;
        }
        t.bytes = t.split(dim, tp).into_iter().flat_map(|p| p.bytes).collect();
    }
}

/// Each dense MLP's gate and up weights, and their moments, as a loader makes of them that
/// holds them as Megatron's fused fc1 (gate stacked on up along the output dim) and cuts it into
/// contiguous blocks, one per TP rank of the resumed mesh (`tp`), without chunking it into gate
/// and up first: each rank takes its block's first half as gate, the second as up. At tp 1 the
/// one block is the whole fc1, and nothing changes.
fn fc1_split_unchunked(tp: usize, full: &mut Shards) {
    const GATE: &str = ".mlp.gate.weight";
    const UP: &str = ".mlp.up.weight";
    let gates: Vec<String> = full.keys().filter(|n| n.ends_with(GATE)).cloned().collect();
    for gate in gates {
        let up = format!("{}{UP}", &gate[..gate.len() - GATE.len()]);
        let (Some(g), Some(u)) = (full.get(&gate), full.get(&up)) else {
            continue;
        };
        // The output dim: the last (column-parallel, split over tp).
        let dim = g.shape.len() - 1;
        let fused = HostTensor::concat(&[g.clone(), u.clone()], dim);
        let (gates, ups): (Vec<HostTensor>, Vec<HostTensor>) = fused
            .split(dim, tp)
            .into_iter()
            .map(|block| {
                let mut halves = block.split(dim, 2).into_iter();
                (halves.next().unwrap(), halves.next().unwrap())
            })
            .unzip();
        full.insert(gate, HostTensor::concat(&gates, dim));
        full.insert(up, HostTensor::concat(&ups, dim));
    }
}

/// A run's record up to the checkpoint followed by the resumed mesh's: losses and norms
/// continue, the first step's tensors are the first mesh's, the weights whichever recorded
/// them.
fn join(a: Record, b: Record) -> Record {
    let cat = |mut x: Vec<f64>, y: Vec<f64>| {
        x.extend(y);
        x
    };
    let mut altered = a.altered;
    altered.extend(b.altered);
    let mut anomalies = a.anomalies;
    anomalies.extend(b.anomalies);
    let mut divergent = a.divergent;
    divergent.extend(b.divergent);
    let mut states = a.states;
    states.extend(b.states);
    let mut inputs = a.inputs;
    inputs.extend(b.inputs);
    Record {
        losses: cat(a.losses, b.losses),
        load_balance: cat(a.load_balance, b.load_balance),
        grad_norms: cat(a.grad_norms, b.grad_norms),
        weights: b.weights.or(a.weights),
        optimizer_step: b.optimizer_step.or(a.optimizer_step),
        collectives: a.collectives + b.collectives,
        altered,
        anomalies,
        divergent,
        unsharded_stale: a.unsharded_stale.or(b.unsharded_stale),
        activation_bytes: a.activation_bytes.max(b.activation_bytes),
        states,
        inputs,
        ..a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A [2, 4] weight whose entry at column c of row r is `base + c` (row 0) or `base + 10 + c`.
    fn weight(base: f32) -> HostTensor {
        let values: Vec<f32> = (0..2)
            .flat_map(|r| (0..4).map(move |c| base + 10.0 * r as f32 + c as f32))
            .collect();
        HostTensor {
            dtype: meshparity_compare::TensorDtype::F32,
            shape: vec![2, 4],
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    fn columns(t: &HostTensor) -> Vec<f32> {
        t.bytes
            .chunks(4)
            .take(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    /// The bug's loader at tp 2: the fused [gate | up] cut in two blocks (all of gate, all of
    /// up), each halved, so gate becomes gate's first half beside up's first half; at tp 1,
    /// nothing moves. Moments go the same way; other tensors are left alone.
    #[test]
    fn the_unchunked_fc1_split_mixes_gate_and_up_only_over_tp() {
        let names = [
            "layers.0.mlp.gate.weight",
            "layers.0.mlp.up.weight",
            "optim.exp_avg.layers.0.mlp.gate.weight",
            "optim.exp_avg.layers.0.mlp.up.weight",
            "layers.0.mlp.down.weight",
        ];
        let full = || -> Shards {
            names
                .iter()
                .zip([0.0, 100.0, 0.0, 100.0, 50.0])
                .map(|(n, base)| (n.to_string(), weight(base)))
                .collect()
        };
        let mut same = full();
        fc1_split_unchunked(1, &mut same);
        assert_eq!(same, full());
        let mut mixed = full();
        fc1_split_unchunked(2, &mut mixed);
        for prefix in ["", "optim.exp_avg."] {
            let gate = &mixed[&format!("{prefix}layers.0.mlp.gate.weight")];
            let up = &mixed[&format!("{prefix}layers.0.mlp.up.weight")];
            assert_eq!(columns(gate), [0.0, 1.0, 100.0, 101.0]);
            assert_eq!(columns(up), [2.0, 3.0, 102.0, 103.0]);
            assert_eq!(gate.shape, [2, 4]);
        }
        assert_eq!(mixed["layers.0.mlp.down.weight"], weight(50.0));
    }
}
