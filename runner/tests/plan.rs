//! The planner on the example specs and on generated ones.

use std::collections::HashSet;
use std::path::Path;

use meshparity_runner::plan::render;
use meshparity_runner::plan::FilterError;
use meshparity_runner::{Filter, JobKind, Plan, Role};
use meshparity_specs::{load, load_text, Disk, Spec};

fn example(name: &str) -> Spec {
    load(&Path::new("../examples").join(name))
        .expect("examples are valid")
        .spec
}

fn spec_from(text: &str) -> Spec {
    match load_text(Path::new("generated.toml"), text.to_owned(), &Disk) {
        Ok(l) => l.spec,
        Err(e) => panic!("generated spec is invalid: {e:?}\n{text}"),
    }
}

#[test]
fn quickstart_plan_snapshot() {
    let plan = Plan::build(&example("quickstart.toml"));
    let all = plan.select(&Filter::default(), None);
    insta::assert_snapshot!(
        "quickstart_text",
        render::text(&plan, &all, "examples/quickstart.toml")
    );
    insta::assert_snapshot!(
        "quickstart_json",
        render::json(&plan, &all, "examples/quickstart.toml")
    );
    insta::assert_snapshot!("quickstart_dot", render::dot(&plan, &all));
}

#[test]
fn full_sweep_plan_snapshot() {
    let plan = Plan::build(&example("full-sweep.toml"));
    let all = plan.select(&Filter::default(), None);
    insta::assert_snapshot!(
        "full_sweep_text",
        render::text(&plan, &all, "examples/full-sweep.toml")
    );
}

#[test]
fn full_sweep_covers_every_family_mesh_kind_level_and_mutation() {
    let plan = Plan::build(&example("full-sweep.toml"));
    let mut levels = HashSet::new();
    let mut mutations = HashSet::new();
    let mut families = HashSet::new();
    let mut kinds = HashSet::new();
    for (_, job) in plan.jobs() {
        families.insert(format!("{:?}", job.model_config.family));
        match &job.kind {
            JobKind::Check { level } => {
                levels.insert(*level);
            }
            JobKind::Mutation { mutation, .. } => {
                mutations.insert(mutation.clone());
            }
            JobKind::Reference | JobKind::Train { .. } => {}
        }
        if let Some(m) = job.mesh_config {
            for (k, on) in [
                ("dp", m.dp > 1),
                ("tp", m.tp > 1),
                ("pp", m.pp > 1),
                ("ep", m.ep > 1),
                ("etp", m.etp > 1),
                ("cp", m.cp > 1),
                ("sp", m.sp),
            ] {
                if on {
                    kinds.insert(k);
                }
            }
        }
    }
    assert_eq!(families.len(), 2);
    assert_eq!(levels.len(), 6, "{levels:?}");
    assert_eq!(kinds.len(), 7, "{kinds:?}");
    // Every mutation but those that need a run setting the sweep leaves at its default (a
    // learning-rate schedule: tests/schedule.rs injects those; weight decay with exemptions:
    // tests/zero.rs; label smoothing: examples/label-smoothing.toml; a padded vocabulary:
    // examples/vocabulary.toml; dropout and recompute: examples/dropout.toml; packed sequences: examples/packing.toml;
    // padded documents under CP: examples/thd.toml; resumption across layouts:
    // examples/resume.toml).
    use meshparity_specs::mutation::Needs;
    let set_elsewhere = [
        Needs::LrSchedule,
        Needs::WeightDecay,
        Needs::LabelSmoothing,
        Needs::PaddedVocab,
        Needs::AttentionDropout,
        Needs::HiddenDropout,
        Needs::Recompute,
        Needs::PackedSequences,
        Needs::PaddedDocuments,
        Needs::Resume,
    ];
    let applicable = meshparity_specs::CATALOG
        .iter()
        .filter(|m| !set_elsewhere.iter().any(|n| m.needs.contains(n)))
        .count();
    assert_eq!(mutations.len(), applicable, "{mutations:?}");
}

#[test]
fn every_job_comes_after_its_dependencies() {
    let plan = Plan::build(&example("full-sweep.toml"));
    for (node, _) in plan.jobs() {
        for dep in plan.dependencies(node) {
            assert!(dep < node);
        }
    }
    assert!(petgraph::algo::toposort(&plan.graph, None).is_ok());
    let ids: HashSet<_> = plan.jobs().map(|(_, j)| j.id).collect();
    assert_eq!(ids.len(), plan.len(), "job ids are unique");
}

#[path = "plan/references.rs"]
mod references;

/// A dense model's meshes train beside their reference (the built-in engine makes the seed
/// checkpoint itself); a moe model's replay the reference's routing, so they wait for it.
/// Every level waits for both.
#[test]
fn only_trainings_that_read_the_reference_wait_for_it() {
    let spec = spec_from(
        r#"
[models.dense]
layers = 2

[models.routed]
family = "moe"
experts = 4
top_k = 2

[models.unreplayed]
family = "moe"
experts = 4
top_k = 2
routing_replay = false

[meshes.dp2]
dp = 2

[[matrix]]
levels = ["roundtrip", "forward", "oracle"]

[mutations]
select = ["all"]
"#,
    );
    let plan = Plan::build(&spec);
    // Whether `n` comes after a job `want` picks, directly or through others.
    let after = |n, want: fn(&JobKind) -> bool| {
        let mut stack = plan.dependencies(n);
        while let Some(d) = stack.pop() {
            if want(&plan.graph[d].kind) {
                return true;
            }
            stack.extend(plan.dependencies(d));
        }
        false
    };
    let reference = |k: &JobKind| *k == JobKind::Reference;
    let train = |k: &JobKind| matches!(k, JobKind::Train { .. });
    for (node, job) in plan.jobs() {
        match &job.kind {
            JobKind::Train { .. } => {
                assert_eq!(plan.dependencies(node).is_empty(), job.model() != "routed");
                assert_eq!(
                    after(node, reference),
                    job.model() == "routed",
                    "{}",
                    job.name
                );
            }
            JobKind::Check { .. } | JobKind::Mutation { .. } => {
                assert!(after(node, reference), "{}", job.name);
                assert!(after(node, train), "{}", job.name);
            }
            _ => {}
        }
    }
}

#[test]
fn filters_select_by_key_glob_and_negation() {
    let plan = Plan::build(&example("quickstart.toml"));
    let names = |filters: &[&str]| -> Vec<String> {
        let sel = plan.select(&Filter::parse(filters).unwrap(), None);
        sel.selected().map(|n| plan.graph[n].name.clone()).collect()
    };
    assert_eq!(
        names(&["mesh=tp2", "level=forward"]),
        ["tiny@f32/tp2/forward"]
    );
    assert_eq!(names(&["mesh=tp2*", "level=oracle"]).len(), 2);
    assert_eq!(names(&["mutation=pp-*"]).len(), 4);
    assert_eq!(names(&["level=reference"]), ["tiny@f32/reference"]);
    assert!(names(&["level!=mutation", "level!=reference"])
        .iter()
        .all(|n| !n.contains("mutation")));
    assert_eq!(names(&["*sp/curve"]), ["tiny@f32/tp2-sp/curve"]);
    assert!(names(&["model=nope"]).is_empty());
    // `|` between globs, and terms under or / and / not / parentheses.
    assert_eq!(names(&["mesh=tp2|pp2", "level=forward"]).len(), 2);
    assert_eq!(
        names(&["level=reference or (mesh=pp2 and level=curve)"]),
        ["tiny@f32/reference", "tiny@f32/pp2/curve"]
    );
    assert_eq!(
        names(&["mesh=tp2* and not level=mutation and not mesh=tp2"]),
        names(&["mesh=tp2-sp", "level!=mutation"])
    );
    for bad in [
        "",
        "mesh=tp2 or",
        "(mesh=tp2",
        "mesh=tp2 and or level=curve",
        "a b",
    ] {
        assert!(
            matches!(Filter::parse(&[bad]), Err(FilterError::Syntax { .. })),
            "{bad}"
        );
    }
    assert!(Filter::parse(&["colour=red"]).is_err());
    assert!(Filter::parse(&["mesh="]).is_err());
    assert!(Filter::parse(&["mesh=[a"]).is_err());
    // Dependencies come along, marked as such.
    let sel = plan.select(&Filter::parse(&["mesh=pp2", "level=oracle"]).unwrap(), None);
    assert_eq!(sel.count(Role::Selected), 1);
    assert_eq!(
        sel.count(Role::Dependency),
        5,
        "reference, training, roundtrip, forward, curve"
    );
}

#[path = "plan/partitions.rs"]
mod partitions;

const MIXED_DEVICES: &str = r#"
[models.small]
[models.big]
device = "gpu"
[meshes.dp2]
dp = 2
[[matrix]]
levels = ["forward"]
"#;

#[test]
fn each_model_runs_on_its_device_with_that_devices_default_table() {
    let plan = Plan::build(&spec_from(MIXED_DEVICES));
    let jobs: Vec<_> = plan.jobs().map(|(_, j)| j).collect();
    // The two models have equal configs but different devices: two references.
    let refs: Vec<_> = jobs
        .iter()
        .filter(|j| j.kind == JobKind::Reference)
        .collect();
    assert_eq!(refs.len(), 2);
    for j in &jobs {
        let want = if j.model() == "big" { "gpu" } else { "cpu" };
        assert_eq!(j.device.to_string(), want, "{}", j.name);
        if let Some(t) = &j.tolerance {
            let table = if want == "gpu" {
                "builtin-gpu"
            } else {
                "builtin"
            };
            assert_eq!(t, table, "{}", j.name);
        }
    }
    // Every check depends on the reference of its own device.
    for (node, j) in plan.jobs() {
        for d in plan.dependencies(node) {
            assert_eq!(plan.graph[d].device, j.device, "{}", j.name);
        }
    }
}

#[test]
fn the_command_lines_device_moves_every_model_and_changes_ids() {
    let cpu = Plan::build(&spec_from(MIXED_DEVICES));
    let mut spec = spec_from(MIXED_DEVICES);
    spec.set_device("cpu".parse().unwrap());
    let all_cpu = Plan::build(&spec);
    assert!(all_cpu.jobs().all(|(_, j)| j.device.is_cpu()));
    // On the CPU both models share one reference again.
    assert_eq!(
        all_cpu
            .jobs()
            .filter(|(_, j)| j.kind == JobKind::Reference)
            .count(),
        1
    );
    // `small` was on the CPU already: its ids do not change; `big`'s do.
    let ids = |p: &Plan, model: &str| -> HashSet<String> {
        p.jobs()
            .filter(|(_, j)| j.kind != JobKind::Reference && j.model() == model)
            .map(|(_, j)| j.id.to_string())
            .collect()
    };
    assert_eq!(ids(&cpu, "small"), ids(&all_cpu, "small"));
    assert!(ids(&cpu, "big").is_disjoint(&ids(&all_cpu, "big")));
}
