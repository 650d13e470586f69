//! The check levels end to end through artifacts on disk and the comparison engine, with the
//! built-in tolerance table: correct meshes pass every level in f64, f32 and bf16 over several
//! seeds, and every catalogued mutation is caught on every mesh where it applies.

mod common;

use std::path::Path;

use burn::tensor::Device;
use common::{mesh, tiny, training};
use meshparity_backends::levels::{self, Setup};
use meshparity_backends::parallel::Fault;
use meshparity_specs::tolerance::ToleranceTable;
use meshparity_specs::{DType, Level, Limits, Loc, Optimizer, SourceFile, CATALOG};

const MESHES: &[&str] = &["dp2", "tp2", "tp2-sp", "pp2-mb4", "dp2-tp2-pp2-mb2"];
const TRAINED: [Level; 3] = [Level::Forward, Level::Curve, Level::Oracle];
const SEEDS: [u64; 3] = [1, 2, 3];

fn limits(level: Level, dtype: DType) -> Limits {
    let loc = Loc::new(&SourceFile::new("<builtin>", ""), 0..0);
    ToleranceTable::builtin(loc)
        .get(level, dtype)
        .unwrap()
        .value
        .clone()
}

fn reference(setup: &Setup<'_>, dir: &Path) {
    levels::reference(setup, dir).unwrap();
}

#[test]
fn correct_meshes_pass_every_level_in_every_dtype() {
    let dev = Device::flex();
    let model = tiny();
    let cases = [
        (DType::F32, Optimizer::Adamw, &SEEDS[..]),
        (DType::F32, Optimizer::Sgd, &SEEDS[..1]),
        (DType::F64, Optimizer::Adamw, &SEEDS[..1]),
        (DType::Bf16, Optimizer::Adamw, &SEEDS[..1]),
    ];
    for (dtype, optimizer, seeds) in cases {
        for &seed in seeds {
            let t = training(seed, optimizer);
            let setup = Setup {
                model: &model,
                training: &t,
                dtype,
                device: &dev,
            };
            let tmp = tempfile::tempdir().unwrap();
            let refdir = tmp.path().join("reference");
            reference(&setup, &refdir);
            for name in MESHES {
                for level in [
                    Level::Roundtrip,
                    Level::Forward,
                    Level::Curve,
                    Level::Oracle,
                ] {
                    let out = tmp.path().join(name).join(level.as_str());
                    let o = levels::check(
                        &setup,
                        &mesh(name),
                        level,
                        &limits(level, dtype),
                        &refdir,
                        &out,
                    )
                    .unwrap();
                    assert!(
                        o.passed,
                        "{name} {level} {dtype} seed {seed}: {}",
                        o.summary()
                    );
                    assert!(
                        o.comparisons.iter().all(|c| c.compared > 0),
                        "{name} {level}: compared nothing"
                    );
                    assert!(o.anomalies.is_empty(), "{name} {level}: {:?}", o.anomalies);
                }
            }
        }
    }
}

#[test]
fn every_mutation_is_caught_wherever_it_applies() {
    let dev = Device::flex();
    let model = tiny();
    let levels: Vec<(Level, Limits)> = TRAINED
        .iter()
        .map(|&l| (l, limits(l, DType::F32)))
        .collect();
    let mut pairs = 0;
    for seed in SEEDS {
        let t = training(seed, Optimizer::Adamw);
        let setup = Setup {
            model: &model,
            training: &t,
            dtype: DType::F32,
            device: &dev,
        };
        let tmp = tempfile::tempdir().unwrap();
        let refdir = tmp.path().join("reference");
        reference(&setup, &refdir);
        for name in MESHES {
            let m = mesh(name);
            for entry in CATALOG.iter().filter(|e| e.applies_to(&m)) {
                let fault = Fault::from_name(entry.name).unwrap();
                let out = tmp.path().join(name).join(entry.name);
                let o = levels::mutation(&setup, &m, fault, &levels, &refdir, &out).unwrap();
                eprintln!("seed {seed} {name} {}: {}", entry.name, o.summary());
                assert!(
                    !o.altered.is_empty(),
                    "{name}: {} was never injected",
                    entry.name
                );
                assert!(o.caught, "{name} seed {seed}: {}", o.summary());
                pairs += 1;
            }
        }
    }
    // Every mutation applies to at least one of the meshes.
    assert!(
        pairs >= 3 * CATALOG.len(),
        "only {pairs} mesh × mutation pairs"
    );
}
