//! Localization: every catalogued mutation is found first where it was injected (the
//! catalog's site), on every quickstart mesh it applies to, and a correct mesh's traces stay
//! within the limit everywhere.

mod common;
#[path = "localize/expected.rs"]
mod expected;

use burn::tensor::{DType, Device};
use common::{mesh, tiny, tiny_moe, tiny_moe_options, training};
use expected::EXPECTED;
use meshparity_backends::levels;
use meshparity_backends::parallel::Fault;
use meshparity_backends::train::{self, Length, Probe, Replay};
use meshparity_judge::cause::{Axes, Cause};
use meshparity_judge::locate::{limit, locate};
use meshparity_specs::catalog::{Phase, CATALOG};
use meshparity_specs::{
    DType as SpecDType, DropPolicy, MeshConfig, ModelConfig, Optimizer, Training,
};
use std::collections::BTreeMap;

const MESHES: &[&str] = &[
    "dp2",
    "tp2",
    "tp2-sp",
    "pp2-mb4",
    "dp2-tp2-pp2-mb2",
    "cp2",
    "dp2-tp2-sp-cp2",
    // Sharded data parallelism (ZeRO-1/2/3): its own bugs — reduce-scatter offsets, the
    // accumulators, the unshard, another shard's optimizer state — and the catalog's.
    "dp2-z1",
    "dp2-tp2-z2-mb2",
    "dp4-z3",
];
const LEN: Length = Length {
    steps: 2,
    weights_after: 0,
    backward: true,
};

fn burn_dtype(dtype: SpecDType) -> DType {
    match dtype {
        SpecDType::Bf16 => DType::BF16,
        _ => DType::F32,
    }
}

/// The oracle's routing (moe), which every traced run replays, as the engine's do.
fn oracle_routing(model: &ModelConfig, t: &Training, dtype: SpecDType) -> Replay {
    train::oracle(model, t, LEN, &Device::default(), burn_dtype(dtype)).replay
}

#[allow(clippy::too_many_arguments)]
fn traced(
    model: &ModelConfig,
    t: &Training,
    replay: &Replay,
    dir: &std::path::Path,
    m: &MeshConfig,
    fault: Option<Fault>,
    dtype: SpecDType,
) {
    let probe = Probe {
        fault,
        trace: true,
        replay: Some(replay).filter(|r| !r.is_empty()),
    };
    let burn_dtype = burn_dtype(dtype);
    let rec = train::mesh(model, m, t, LEN, probe, &Device::default(), burn_dtype).unwrap();
    levels::trace::write(dir, m.microbatches as usize, rec.trace).unwrap();
}

/// A trace of the first step's forward alone — what a run whose failure the forward level
/// found is traced with — is the whole trace's first entries, bit for bit: every forward site
/// first appears before any backward one, on every kind of mesh (pipeline 1F1B and expert
/// parallelism included), so a
/// localization that stops in that forward finds the same site in either.
#[test]
fn a_forward_trace_is_the_start_of_the_whole_trace() {
    let t = training(7, Optimizer::Adamw);
    let forward = Length {
        steps: 1,
        weights_after: 0,
        backward: false,
    };
    let dense = [
        "dp2",
        "tp2-sp",
        "pp2-mb4",
        "dp2-tp2-pp2-mb2",
        "dp2-tp2-sp-cp2",
    ];
    let moe = ["dp2-ep2", "dp2-tp2-sp-ep2-etp2"];
    let cases = dense.map(|m| (tiny(), m)).into_iter();
    for (model, name) in cases.chain(moe.map(|m| (tiny_moe(), m))) {
        let replay = oracle_routing(&model, &t, SpecDType::F32);
        let m = mesh(name);
        let dir = tempfile::tempdir().unwrap();
        let read = |len: Length, sub: &str| {
            let probe = Probe {
                fault: None,
                trace: true,
                replay: Some(&replay).filter(|r| !r.is_empty()),
            };
            let rec =
                train::mesh(&model, &m, &t, len, probe, &Device::default(), DType::F32).unwrap();
            let out = dir.path().join(sub);
            levels::trace::write(&out, m.microbatches as usize, rec.trace).unwrap();
            meshparity_engine::trace::read_trace(&out).unwrap()
        };
        let (whole, whole_values) = read(LEN, "whole");
        let (first, first_values) = read(forward, "forward");
        assert!(!first.entries.is_empty(), "{name}");
        assert!(first.entries.len() < whole.entries.len(), "{name}");
        for (f, w) in first.entries.iter().zip(&whole.entries) {
            assert_eq!((&f.key, &f.like), (&w.key, &w.like), "{name}");
            assert_eq!(
                first_values[&f.key], whole_values[&w.key],
                "{name}: {}",
                f.key
            );
        }
    }
}

#[test]
fn every_mutation_is_localized_where_it_was_injected_f32() {
    localized(&tiny(), MESHES, SpecDType::F32, 40);
}

#[test]
fn every_mutation_is_localized_where_it_was_injected_bf16() {
    localized(&tiny(), MESHES, SpecDType::Bf16, 40);
}

/// The interleaved pipeline (2 chunks per pipeline rank, so 4 layers): the dense catalog on
/// its meshes, and the chunks run out of order.
#[test]
fn interleaved_pipeline_mutations_are_localized_where_they_were_injected() {
    let model = ModelConfig {
        layers: 4,
        ..tiny()
    };
    let meshes = ["pp2-mb2-interleaved", "dp2-tp2-pp2-mb2-interleaved"];
    for dtype in [SpecDType::F32, SpecDType::Bf16] {
        localized(&model, &meshes, dtype, 20);
    }
}

/// Label smoothing (ε = 0.1) and z-loss: the dense catalog on the meshes that split the
/// vocabulary (TP, with SP and pipeline stages) or the sequence (CP), the uniform share left
/// unreduced; in f32 over a vocabulary TP pads (one short of tiny's), the padding left in the
/// softmax. In bf16 the vocabulary is tiny's: one padding column of 64 moves Σ exp by ~1/64,
/// under what a bf16 trace resolves (localization's bf16 site limit is 6e-2; docs/verdicts.md
/// has the padding bug's bf16 detection power).
#[test]
fn label_smoothing_mutations_are_localized_where_they_were_injected() {
    let smoothed = Training {
        label_smoothing: Some(0.1),
        z_loss: Some(1e-3),
        ..training(7, Optimizer::Adamw)
    };
    let padded = ModelConfig {
        vocab: tiny().vocab - 1,
        ..tiny()
    };
    let meshes = ["tp2", "tp2-sp", "dp2-tp2-pp2-mb2", "cp2"];
    localized_with(&padded, &smoothed, &meshes, SpecDType::F32, 30);
    localized_with(&tiny(), &smoothed, &meshes, SpecDType::Bf16, 30);
}

/// Dropout on the attention probabilities and the residual branches: the dense catalog with
/// every mask drawn where it belongs, and the random streams' own bugs (a TP region drawn from
/// the replicated stream, a replicated region from a forked one, CP ranks at local indices, a
/// recompute that does not restore the model-parallel stream).
#[test]
fn dropout_mutations_are_localized_where_they_were_injected() {
    let dropped = Training {
        dropout: Some(meshparity_specs::Dropout {
            attention: 0.1,
            hidden: 0.1,
        }),
        ..training(7, Optimizer::Adamw)
    };
    let meshes = ["tp2", "tp2-sp", "dp2-tp2-pp2-mb2", "cp2", "dp2-tp2-sp-cp2"];
    for dtype in [SpecDType::F32, SpecDType::Bf16] {
        localized_with(&tiny(), &dropped, &meshes, dtype, 30);
    }
    // The moe family, whose stream after the attention block is first traced at the experts'
    // input, not an MLP's TP region.
    localized_with(
        &tiny_moe(),
        &dropped,
        &["dp2-tp2-pp2-mb2"],
        SpecDType::F32,
        10,
    );
    // Recompute, full and selective: the catalog with backward re-running the forward, and
    // the re-run drawing unrestored masks.
    for (recompute, dtype) in [
        (meshparity_specs::Recompute::Full, SpecDType::F32),
        (meshparity_specs::Recompute::Selective, SpecDType::Bf16),
    ] {
        let recomputed = Training {
            recompute: Some(recompute),
            ..dropped.clone()
        };
        localized_with(&tiny(), &recomputed, &["tp2", "dp2-tp2-sp-cp2"], dtype, 20);
    }
}

/// Packed sequences with prompt masks: the dense catalog over documents (attention per
/// document, positions restarting, fewer labels counted), and the ring that masks the chunks it
/// receives without their documents.
#[test]
fn packed_sequence_mutations_are_localized_where_they_were_injected() {
    let packed = Training {
        packing: Some(meshparity_specs::Packing {
            documents: true,
            prompts: true,
            pad_to: None,
        }),
        ..training(7, Optimizer::Adamw)
    };
    let long = ModelConfig {
        seq_len: 16,
        ..tiny()
    };
    let meshes = ["tp2-sp", "cp2", "dp2-tp2-sp-cp2"];
    for dtype in [SpecDType::F32, SpecDType::Bf16] {
        localized_with(&long, &packed, &meshes, dtype, 20);
    }
}

/// Padded documents under CP (the THD layout): the dense catalog over per-document chunks,
/// and the batch cut by rows while attention takes the per-document layout.
#[test]
fn padded_document_mutations_are_localized_where_they_were_injected() {
    let thd = Training {
        packing: Some(meshparity_specs::Packing {
            documents: true,
            prompts: true,
            pad_to: Some(8),
        }),
        ..training(7, Optimizer::Adamw)
    };
    let long = ModelConfig {
        seq_len: 16,
        ..tiny()
    };
    for dtype in [SpecDType::F32, SpecDType::Bf16] {
        localized_with(&long, &thd, &["cp2", "dp2-tp2-sp-cp2"], dtype, 20);
    }
}

/// The moe family: the dense catalog on its meshes, the router's own bugs and expert
/// parallelism's.
#[test]
fn moe_mutations_are_localized_where_they_were_injected() {
    let meshes = [
        "dp2",
        "tp2-sp",
        "cp2",
        "dp2-tp2-sp-cp2",
        "dp2-ep2",
        "dp4-ep2",
        "dp2-tp2-sp-ep2-etp2",
    ];
    for dtype in [SpecDType::F32, SpecDType::Bf16] {
        localized(&tiny_moe(), &meshes, dtype, 30);
    }
}

/// The moe options (sigmoid router, score-correction bias, shared expert, capacity): their own
/// bugs — capacity decided per rank, the bias moved by a rank's own load — and the catalog's.
#[test]
fn moe_option_mutations_are_localized_where_they_were_injected() {
    let meshes = ["dp2", "tp2-sp", "cp2", "dp2-ep2", "dp2-tp2-sp-ep2-etp2"];
    for (dtype, policy) in [
        (SpecDType::F32, DropPolicy::Probs),
        (SpecDType::Bf16, DropPolicy::Position),
    ] {
        localized(&tiny_moe_options(policy), &meshes, dtype, 20);
    }
}

/// Whether `cause` names `mutation`'s: its kind, and its axis where one is expected (a named
/// `dp·cp` includes `dp`: the reduction missing over both is missing over dp).
fn rightly_named(mutation: &str, cause: Option<&Cause>) -> bool {
    let Some(c) = cause else { return false };
    let fits = |x: &str| match x.split_once(':') {
        None => c.kind.as_str() == x,
        Some((kind, axis)) => {
            c.kind.as_str() == kind
                && c.axis
                    .as_deref()
                    .is_some_and(|a| a == axis || a.split('·').any(|p| p == axis))
        }
    };
    EXPECTED
        .iter()
        .find(|(m, _)| *m == mutation)
        .is_some_and(|(_, ok)| ok.iter().any(|x| fits(x)))
}

/// Per mutation: (rightly named, all), and the labels named.
type Tally = BTreeMap<&'static str, (usize, usize, Vec<String>)>;

fn print_tally(t: &Tally) -> f64 {
    let (right, all) = t.values().fold((0, 0), |(r, a), v| (r + v.0, a + v.1));
    for (m, (r, a, labels)) in t {
        let mut l = labels.clone();
        l.sort();
        l.dedup();
        eprintln!("cause {m}: {r}/{a} right; named {}", l.join(", "));
    }
    let share = right as f64 / all.max(1) as f64;
    eprintln!("causes: {right}/{all} right ({:.0} %)", 100.0 * share);
    share
}

/// The share of (mesh, mutation) pairs whose likely cause must be named rightly: issue 37's
/// goal. Measured on the quickstart's meshes: 87 % f32 and 88 % bf16 (dense), 90–91 % (moe).
const RIGHT_CAUSES: f64 = 0.8;

fn localized(model: &ModelConfig, meshes: &[&str], dtype: SpecDType, at_least: usize) {
    localized_with(
        model,
        &training(7, Optimizer::Adamw),
        meshes,
        dtype,
        at_least,
    );
}

fn localized_with(
    model: &ModelConfig,
    training: &Training,
    meshes: &[&str],
    dtype: SpecDType,
    at_least: usize,
) {
    let t = localized_tally(model, training, meshes, dtype, at_least);
    let share = print_tally(&t);
    assert!(
        share >= RIGHT_CAUSES,
        "likely causes right for {:.0} % of the pairs, under {:.0} %",
        100.0 * share,
        100.0 * RIGHT_CAUSES
    );
}

fn localized_tally(
    model: &ModelConfig,
    t: &Training,
    meshes: &[&str],
    dtype: SpecDType,
    at_least: usize,
) -> Tally {
    let mut tally = Tally::new();
    let root = tempfile::tempdir().unwrap();
    let reference = root.path().join("reference");
    let replay = oracle_routing(model, t, dtype);
    traced(
        model,
        t,
        &replay,
        &reference,
        &MeshConfig::SINGLE,
        None,
        dtype,
    );
    let mut checked = 0;
    for name in meshes {
        let m = mesh(name);
        let correct = root.path().join(format!("{name}-correct"));
        traced(model, t, &replay, &correct, &m, None, dtype);
        let l = locate(&reference, &correct, dtype, &Axes::of(&m)).unwrap();
        let worst = l.sites.iter().map(|s| s.relative_l2).fold(0.0, f64::max);
        assert!(l.first.is_none(), "{name} correct: {}", l.summary());
        assert!(
            l.compared > 50,
            "{name}: only {} values compared",
            l.compared
        );
        // The error-analysis bound beside the calibrated limit: how many correct values
        // exceed it (the bound is a second opinion, not a gate).
        let over = l
            .sites
            .iter()
            .filter(|s| s.bound.is_some_and(|b| s.relative_l2 > b))
            .count();
        let ratio = l
            .sites
            .iter()
            .filter_map(|s| Some(s.relative_l2 / s.bound?))
            .fold(0.0, f64::max);
        eprintln!(
            "{name}: correct, {} values, worst relative L2 {worst:.1e} (limit {:.0e}); \
             {over} over the error-analysis bound, worst {ratio:.1}× it",
            l.compared,
            limit(dtype)
        );
        for mutation in CATALOG
            .iter()
            // Checkpoint bugs show in the roundtrip's files, report bugs in the logged metric:
            // neither in the training's trace.
            .filter(|x| {
                x.applies_to(model, &m, t) && !matches!(x.phase, Phase::Checkpoint | Phase::Report)
            })
        {
            let dir = root.path().join(format!("{name}-{}", mutation.name));
            traced(
                model,
                t,
                &replay,
                &dir,
                &m,
                Fault::from_name(mutation.name),
                dtype,
            );
            let l = locate(&reference, &dir, dtype, &Axes::of(&m)).unwrap();
            let first = l
                .first
                .as_ref()
                .unwrap_or_else(|| panic!("{name} {}: {}", mutation.name, l.summary()));
            eprintln!("{name} {}: {}", mutation.name, l.summary());
            let named = l.cause.as_ref().map_or("none".to_owned(), Cause::label);
            let entry = tally.entry(mutation.name).or_default();
            entry.0 += usize::from(rightly_named(mutation.name, l.cause.as_ref()));
            entry.1 += 1;
            entry.2.push(named);
            assert!(
                mutation.site_matches(&first.site),
                "{name} {}: localized to {}, injected at {}",
                mutation.name,
                l.summary(),
                mutation.site
            );
            checked += 1;
        }
    }
    assert!(checked > at_least, "only {checked} mutation × mesh pairs");
    tally
}
