//! Localization: every catalogued mutation is found first where it was injected (the
//! catalog's site), on every quickstart mesh it applies to, and a correct mesh's traces stay
//! within the limit everywhere.

mod common;

use burn::tensor::{DType, Device};
use common::{mesh, tiny, tiny_moe, tiny_moe_options, training};
use meshparity_backends::levels;
use meshparity_backends::parallel::Fault;
use meshparity_backends::train::{self, Length, Probe, Replay};
use meshparity_engine::locate::{limit, locate};
use meshparity_specs::catalog::{Phase, CATALOG};
use meshparity_specs::{DType as SpecDType, DropPolicy, MeshConfig, ModelConfig, Optimizer};

const MESHES: &[&str] = &[
    "dp2",
    "tp2",
    "tp2-sp",
    "pp2-mb4",
    "dp2-tp2-pp2-mb2",
    "cp2",
    "dp2-tp2-sp-cp2",
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
fn oracle_routing(model: &ModelConfig, dtype: SpecDType) -> Replay {
    let t = training(7, Optimizer::Adamw);
    train::oracle(model, &t, LEN, &Device::default(), burn_dtype(dtype)).replay
}

fn traced(
    model: &ModelConfig,
    replay: &Replay,
    dir: &std::path::Path,
    m: &MeshConfig,
    fault: Option<Fault>,
    dtype: SpecDType,
) {
    let t = training(7, Optimizer::Adamw);
    let probe = Probe {
        fault,
        trace: true,
        replay: Some(replay).filter(|r| !r.is_empty()),
    };
    let burn_dtype = burn_dtype(dtype);
    let rec = train::mesh(model, m, &t, LEN, probe, &Device::default(), burn_dtype).unwrap();
    levels::trace::write(dir, m.microbatches as usize, rec.trace).unwrap();
}

#[test]
fn every_mutation_is_localized_where_it_was_injected_f32() {
    localized(&tiny(), MESHES, SpecDType::F32, 40);
}

#[test]
fn every_mutation_is_localized_where_it_was_injected_bf16() {
    localized(&tiny(), MESHES, SpecDType::Bf16, 40);
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

fn localized(model: &ModelConfig, meshes: &[&str], dtype: SpecDType, at_least: usize) {
    let root = tempfile::tempdir().unwrap();
    let reference = root.path().join("reference");
    let replay = oracle_routing(model, dtype);
    traced(model, &replay, &reference, &MeshConfig::SINGLE, None, dtype);
    let mut checked = 0;
    for name in meshes {
        let m = mesh(name);
        let correct = root.path().join(format!("{name}-correct"));
        traced(model, &replay, &correct, &m, None, dtype);
        let l = locate(&reference, &correct, dtype).unwrap();
        let worst = l.sites.iter().map(|s| s.relative_l2).fold(0.0, f64::max);
        assert!(l.first.is_none(), "{name} correct: {}", l.summary());
        assert!(
            l.compared > 50,
            "{name}: only {} values compared",
            l.compared
        );
        eprintln!(
            "{name}: correct, {} values, worst relative L2 {worst:.1e} (limit {:.0e})",
            l.compared,
            limit(dtype)
        );
        for mutation in CATALOG.iter().filter(|x| {
            x.applies_to(model, &m, &training(7, Optimizer::Adamw)) && x.phase != Phase::Checkpoint
        }) {
            let dir = root.path().join(format!("{name}-{}", mutation.name));
            traced(
                model,
                &replay,
                &dir,
                &m,
                Fault::from_name(mutation.name),
                dtype,
            );
            let l = locate(&reference, &dir, dtype).unwrap();
            let first = l
                .first
                .as_ref()
                .unwrap_or_else(|| panic!("{name} {}: {}", mutation.name, l.summary()));
            eprintln!("{name} {}: {}", mutation.name, l.summary());
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
}
