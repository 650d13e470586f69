//! Partitions of a plan (`--partition`): disjoint, covering, dependencies kept.

use std::collections::HashSet;

use meshparity_runner::{Filter, Partition, Plan};
use proptest::prelude::*;

use super::spec_from;

/// A random valid spec: some models, some meshes (all fitting), random levels.
fn spec_text(
    models: usize,
    meshes: &[(u32, u32, u32)],
    levels: &[&str],
    mutations: bool,
) -> String {
    let mut s = String::from("[run]\nbatch = 8\n");
    for i in 0..models {
        s += &format!(
            "[models.m{i}]\nlayers = {}\nvocab = {}\n",
            2 + 2 * (i % 2),
            64 + 64 * i
        );
    }
    for (i, (dp, tp, pp)) in meshes.iter().enumerate() {
        s += &format!("[meshes.s{i}]\ndp = {dp}\ntp = {tp}\npp = {pp}\n");
    }
    let quoted: Vec<String> = levels.iter().map(|l| format!("\"{l}\"")).collect();
    s += &format!("[[matrix]]\nlevels = [{}]\n", quoted.join(", "));
    if mutations {
        s += "[mutations]\nselect = [\"all\"]\n";
    }
    s
}

fn mesh() -> impl Strategy<Value = (u32, u32, u32)> {
    (
        prop::sample::select(vec![1u32, 2, 4]),
        prop::sample::select(vec![1u32, 2]),
        prop::sample::select(vec![1u32, 2]),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn partitions_are_disjoint_cover_and_keep_dependencies(
        models in 1usize..4,
        meshes in prop::collection::vec(mesh(), 1..5),
        levels in prop::sample::subsequence(vec!["roundtrip", "forward", "curve", "oracle"], 1..=4),
        mutations in any::<bool>(),
        total in 1u64..6,
        hash in any::<bool>(),
        filter in prop::sample::select(vec![vec![], vec!["level!=roundtrip"], vec!["mesh=s0,s1"], vec!["level=mutation"]]),
    ) {
        let spec = spec_from(&spec_text(models, &meshes, &levels, mutations));
        let plan = Plan::build(&spec);
        let filter = Filter::parse(&filter).unwrap();
        let filtered: HashSet<_> = plan.select(&filter, None).selected().collect();
        let mut seen = HashSet::new();
        for shard in 1..=total {
            let p = if hash { Partition::Hash { shard, total } } else { Partition::Count { shard, total } };
            let sel = plan.select(&filter, Some(p));
            let in_sel: HashSet<_> = sel.jobs.iter().map(|(n, _)| *n).collect();
            for n in sel.selected() {
                prop_assert!(filtered.contains(&n), "a partition only holds filtered jobs");
                prop_assert!(seen.insert(n), "job {} in two shards", plan.graph[n].name);
            }
            for &(n, _) in &sel.jobs {
                for d in plan.dependencies(n) {
                    prop_assert!(in_sel.contains(&d), "dependency of {} missing", plan.graph[n].name);
                }
            }
        }
        prop_assert_eq!(seen, filtered, "shards together cover every filtered job");
    }
}
