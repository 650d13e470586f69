//! Reference jobs: ids that survive reordering, models that share one, and the states a
//! reference keeps for the `[[resume]]` pairs that judge against it.

use std::collections::HashMap;

use meshparity_runner::{JobKind, Plan};

use super::spec_from;

const TWO_MODELS: &str = r#"
[run]
seed = 7

[models.a]
layers = 2

[models.b]
heads = 2
hidden = 32

[models.a-again]
layers = 2

[meshes.dp2]
dp = 2

[meshes.tp2]
tp = 2

[[matrix]]
levels = ["forward", "oracle"]
"#;

const TWO_MODELS_REORDERED: &str = r#"
[meshes.tp2]
tp = 2

[[matrix]]
levels = ["oracle", "forward"]

[models.a-again]
layers = 2

[models.b]
hidden = 32
heads = 2

[meshes.dp2]
dp = 2

[run]
seed = 7

[models.a]
layers = 2
"#;

#[test]
fn job_ids_survive_reordering_the_spec() {
    let ids = |text| -> HashMap<String, String> {
        let plan = Plan::build(&spec_from(text));
        // A shared reference job is named after whichever of its models comes first in the
        // file, so key it by its sorted model list.
        plan.jobs()
            .map(|(_, j)| {
                let key = match j.kind {
                    JobKind::Reference => {
                        let mut m = j.models.clone();
                        m.sort();
                        format!("reference {m:?} {}", j.dtype)
                    }
                    _ => j.name.clone(),
                };
                (key, j.id.to_string())
            })
            .collect()
    };
    let a = ids(TWO_MODELS);
    let b = ids(TWO_MODELS_REORDERED);
    let names = |m: &HashMap<String, String>| {
        let mut v: Vec<_> = m.keys().cloned().collect();
        v.sort();
        v
    };
    assert_eq!(names(&a), names(&b));
    for (name, id) in &a {
        assert_eq!(&b[name], id, "{name}");
    }
    // A seed change is a different computation, so a different job.
    let reseeded = ids(&TWO_MODELS.replace("seed = 7", "seed = 8"));
    assert!(reseeded.values().all(|id| !a.values().any(|x| x == id)));
}

#[test]
fn models_with_equal_configs_share_one_reference_job() {
    let plan = Plan::build(&spec_from(TWO_MODELS));
    let refs: Vec<_> = plan
        .jobs()
        .filter(|(_, j)| j.kind == JobKind::Reference)
        .map(|(_, j)| j)
        .collect();
    assert_eq!(refs.len(), 2, "a and a-again share; b has its own");
    assert_eq!(refs[0].models, vec!["a", "a-again"]);
    // Both models' first levels (2 models × 2 meshes) hang off the shared reference.
    let shared = plan.node(refs[0].id).unwrap();
    let dependents: Vec<_> = plan
        .jobs()
        .filter(|(n, _)| plan.dependencies(*n).contains(&shared))
        .map(|(_, j)| j)
        .collect();
    assert_eq!(dependents.len(), 4, "{dependents:?}");
    assert!(dependents
        .iter()
        .all(|j| matches!(j.kind, JobKind::Check { .. }) && j.model() != "b"));
}

/// A reference keeps its whole state only where a `[[resume]]` pair of its own model is judged
/// by it: at the pairs' checkpoint steps and after `oracle_steps`. A model no pair includes is
/// asked for none (on a command engine, each state is a run of the program).
#[test]
fn only_references_of_paired_models_keep_states() {
    let text = r#"
[run]
seed = 7
steps = 5
oracle_steps = 4

[models.paired]
layers = 2

[models.plain]
hidden = 32
heads = 2

[meshes.dp2]
dp = 2

[meshes.tp2]
tp = 2

[[resume]]
from = ["dp2"]
to = ["tp2"]
at = 2

[[matrix]]
models = ["paired"]
meshes = ["dp2"]
levels = ["oracle"]

[[matrix]]
models = ["plain"]
meshes = ["tp2"]
levels = ["oracle"]
"#;
    let plan = Plan::build(&spec_from(text));
    let states: HashMap<String, Vec<u32>> = plan
        .jobs()
        .filter(|(_, j)| j.kind == JobKind::Reference)
        .map(|(_, j)| (j.model().to_owned(), j.training.states_at.clone()))
        .collect();
    assert_eq!(states["paired"], [2, 4], "{states:?}");
    assert!(states["plain"].is_empty(), "{states:?}");
}

/// Two models with equal configurations share one reference job even when only one is paired:
/// the states belong to the reference's configuration, not to a model's name.
#[test]
fn equal_models_share_one_reference_when_only_one_is_paired() {
    let text = r#"
[run]
seed = 7
steps = 5
oracle_steps = 4

[models.paired]
layers = 2

[models.twin]
layers = 2

[meshes.dp2]
dp = 2

[meshes.tp2]
tp = 2

[[resume]]
from = ["dp2"]
to = ["tp2"]
at = 2

[[matrix]]
models = ["paired"]
meshes = ["dp2"]
levels = ["oracle"]

[[matrix]]
models = ["twin"]
meshes = ["tp2"]
levels = ["oracle"]
"#;
    let plan = Plan::build(&spec_from(text));
    let refs: Vec<_> = plan
        .jobs()
        .filter(|(_, j)| j.kind == JobKind::Reference)
        .map(|(_, j)| j)
        .collect();
    assert_eq!(refs.len(), 1, "{refs:?}");
    assert_eq!(refs[0].models, ["paired", "twin"]);
    assert_eq!(refs[0].training.states_at, [2, 4]);
}
