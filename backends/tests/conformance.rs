//! The burn engine passes the engine conformance suite (`meshparity_judge::conformance`): its
//! reference and mesh runs write the artifact contract, correct meshes pass every level under
//! the built-in limits, every mutation it offers is caught where it applies, a missing
//! artifact is an error, and reruns are bit-identical. The model, training and limits are the
//! quickstart's, in f32 and bf16.

mod common;

use std::path::Path;

use meshparity_backends::Backend;
use meshparity_engine::Engine;
use meshparity_judge::conformance::{suite, Setup};
use meshparity_specs::tolerance::BUILTIN;
use meshparity_specs::{DType, Level};

fn conform(dtype: DType) {
    let meshes = [
        "dp2",
        "tp2-sp",
        "pp2-mb2",
        "dp2-tp2-pp2-mb2",
        "dp2-tp2-sp-cp2",
    ];
    conform_model(None, dtype, &meshes);
}

/// The quickstart's model, or it with `family`, on `meshes`.
fn conform_model(family: Option<meshparity_specs::Family>, dtype: DType, meshes: &[&str]) {
    let loaded = meshparity_specs::load(Path::new("../examples/quickstart.toml")).expect("valid");
    let spec = &loaded.spec;
    let mut model = spec.models.values().next().expect("a model").config();
    if let Some(family) = family {
        model.family = family;
        model.experts = Some(4);
        model.top_k = Some(2);
    }
    let levels: Vec<_> = model
        .family
        .levels()
        .iter()
        .copied()
        .filter_map(|l| match spec.limits(BUILTIN, l, dtype) {
            Some((_, limits)) => Some((l, limits.clone())),
            // Judged where the table gates it: bf16 and f16 in the built-in one.
            None if l == meshparity_specs::Level::Trace => None,
            None => panic!("the built-in table gates {l} in {dtype}"),
        })
        .collect();
    let meshes: Vec<_> = meshes.iter().map(|m| common::mesh(m)).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let setup = Setup {
        model: &model,
        training: &spec.run.training,
        dtype,
        meshes: &meshes,
        levels: &levels,
        deterministic: true,
    };
    let failures = suite(&Backend::cpu(), &setup, dir.path());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn burn_engine_conforms_in_f32() {
    conform(DType::F32);
}

#[test]
fn burn_engine_conforms_in_bf16() {
    conform(DType::Bf16);
}

#[test]
fn burn_engine_conforms_for_moe() {
    let family = Some(meshparity_specs::Family::Moe);
    conform_model(
        family,
        DType::F32,
        &[
            "dp2",
            "tp2-sp",
            "dp2-tp2-sp-cp2",
            "dp4-ep2",
            "dp2-tp2-sp-ep2-etp2",
        ],
    );
}

/// Every parallel axis is computed: expert and context parallel cells are supported, for the
/// moe family; a dense model on an expert mesh is the spec's misfit (`fit.rs`), not the engine's.
#[test]
fn expert_and_context_parallel_cells_are_supported() {
    let engine = Backend::cpu();
    let model = common::tiny_moe();
    for m in ["dp2-ep2", "dp2-tp2-sp-ep2-etp2", "dp2-cp2"] {
        let mesh = common::mesh(m);
        assert!(
            engine.supports(&model, Some(&mesh), DType::F32).is_ok(),
            "{m}"
        );
    }
}

/// An engine that quietly ignores the mutation it is asked to inject: the suite must say so.
struct IgnoresMutations(Backend);

impl Engine for IgnoresMutations {
    fn describe(&self) -> meshparity_engine::Description {
        self.0.describe()
    }
    fn supports(
        &self,
        model: &meshparity_specs::ModelConfig,
        mesh: Option<&meshparity_specs::MeshConfig>,
        dtype: DType,
    ) -> Result<(), meshparity_specs::Unsupported> {
        self.0.supports(model, mesh, dtype)
    }
    fn mutations(&self) -> Vec<String> {
        vec!["dp-skip-grad-all-reduce".to_owned()]
    }
    fn reference(
        &self,
        req: &meshparity_engine::RunRequest<'_>,
    ) -> Result<meshparity_engine::Manifest, meshparity_engine::EngineError> {
        self.0.reference(req)
    }
    fn run(
        &self,
        req: &meshparity_engine::RunRequest<'_>,
    ) -> Result<meshparity_engine::Manifest, meshparity_engine::EngineError> {
        self.0.run(&meshparity_engine::RunRequest {
            mutation: None,
            ..*req
        })
    }
}

#[test]
fn the_suite_fails_an_engine_that_ignores_mutations() {
    let loaded = meshparity_specs::load(Path::new("../examples/quickstart.toml")).expect("valid");
    let spec = &loaded.spec;
    let model = spec.models.values().next().expect("a model").config();
    let levels: Vec<_> = [Level::Forward, Level::Curve, Level::Oracle]
        .into_iter()
        .map(|l| {
            (
                l,
                spec.limits(BUILTIN, l, DType::F32)
                    .expect("built-in")
                    .1
                    .clone(),
            )
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let setup = Setup {
        model: &model,
        training: &spec.run.training,
        dtype: DType::F32,
        meshes: &[common::mesh("dp2")],
        levels: &levels,
        deterministic: false,
    };
    let failures = suite(&IgnoresMutations(Backend::cpu()), &setup, dir.path());
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].contains("dp-skip-grad-all-reduce"),
        "{failures:?}"
    );
}
