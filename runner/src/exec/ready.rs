//! Which jobs may start, and in what order: dependency counts and a ready set, so an event
//! costs the jobs it touches, not a scan of the whole run (a 100,000-job sweep would otherwise
//! spend its time re-checking jobs that cannot start).
//!
//! Ready jobs start longest critical path first: a job's path is its own cost plus the longest
//! path among the jobs that wait for it, so trainings (which judge jobs wait for) start before
//! judges, and a run ends when its longest chain does. In plan order, the four judges of one
//! mesh started before the next mesh's training whenever a slot freed: a 4-mesh hidden-512
//! llama run left a core idle for a sixth of its length.
//!
//! Among jobs with the same path the widest (most slots) starts first: a job taking several
//! slots starts only when they are all free, which they are at the start of a run; later it
//! waits for its pool to drain, and its judges then run alone at the end. Starting the
//! dp2·tp2·pp2 training first took half a second off the 4-mesh hidden-512 run (11 s).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use petgraph::graph::NodeIndex;

use crate::exec::slots::Slots;
use crate::plan::{JobKind, Plan};

/// A ready job's place in the start order: longest critical path first, then the widest,
/// then plan order.
type Key = (Reverse<u64>, Reverse<usize>, usize);

/// Jobs by their index in the run's order (plan order).
pub struct Ready {
    /// Unfinished dependencies of each job.
    pending: Vec<usize>,
    dependents: Vec<Vec<usize>>,
    /// Critical-path length of each job.
    path: Vec<u64>,
    /// Slots each job takes.
    width: Vec<usize>,
    /// Jobs whose dependencies all passed, not yet started, in start order.
    ready: BTreeSet<Key>,
    /// Jobs a dependency of which did not pass, with its index: they are skipped, not run.
    blocked: Vec<(usize, usize)>,
    /// (dependency, dependent) edges that only order the two (`--no-skip`: a level after a
    /// failed level still runs); a failed dependency over such an edge blocks nothing.
    ordering_only: std::collections::HashSet<(usize, usize)>,
    /// Jobs that ran after a failure over ordering-only edges: their dependents over ordinary
    /// edges are blocked whatever they found (a mutation after checks of which one failed).
    tainted: Vec<bool>,
}

/// Each job's dependencies among the jobs of `order`, by their index there.
pub fn dependencies(plan: &Plan, order: &[NodeIndex]) -> Vec<Vec<usize>> {
    let index: HashMap<NodeIndex, usize> = order.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    order
        .iter()
        .map(|n| {
            plan.dependencies(*n)
                .iter()
                .filter_map(|d| index.get(d).copied())
                .collect()
        })
        .collect()
}

impl Ready {
    /// The jobs' dependency counts, in `order`: each job's dependencies among the selected jobs,
    /// its cost and its slot width; with `no_skip`, a check after a failed check still runs (the
    /// edge only orders them).
    pub fn of_plan(plan: &Plan, order: &[NodeIndex], slots: &Slots, no_skip: bool) -> Ready {
        let deps = dependencies(plan, order);
        let costs: Vec<u64> = order.iter().map(|n| plan.graph[*n].kind.cost()).collect();
        let widths: Vec<usize> = order
            .iter()
            .map(|n| slots.weight(&plan.graph[*n]))
            .collect();
        let mut ready = Ready::new(&deps, &costs, &widths);
        if no_skip {
            let is_check = |i: usize| matches!(plan.graph[order[i]].kind, JobKind::Check { .. });
            for (k, ds) in deps.iter().enumerate() {
                for &d in ds.iter().filter(|&&d| is_check(d) && is_check(k)) {
                    ready.order_only(d, k);
                }
            }
        }
        ready
    }

    /// `deps[i]`: the indices job `i` depends on (within the run); `cost[i]`: job `i`'s rough
    /// cost (any unit, the same for every job); `width[i]`: the slots it takes.
    pub fn new(deps: &[Vec<usize>], cost: &[u64], width: &[usize]) -> Self {
        let mut dependents = vec![Vec::new(); deps.len()];
        for (i, ds) in deps.iter().enumerate() {
            for &d in ds {
                dependents[d].push(i);
            }
        }
        let pending: Vec<usize> = deps.iter().map(Vec::len).collect();
        let path = critical_paths(&dependents, cost);
        let mut ready = Self {
            pending,
            dependents,
            path,
            width: width.to_vec(),
            ready: BTreeSet::new(),
            blocked: Vec::new(),
            ordering_only: std::collections::HashSet::new(),
            tainted: vec![false; deps.len()],
        };
        ready.ready = (0..deps.len())
            .filter(|&i| ready.pending[i] == 0)
            .map(|i| ready.key(i))
            .collect();
        ready
    }

    /// Let job `k` run after `dependency` whether or not that passes (it still waits for it).
    pub fn order_only(&mut self, dependency: usize, k: usize) {
        self.ordering_only.insert((dependency, k));
    }

    fn key(&self, i: usize) -> Key {
        (Reverse(self.path[i]), Reverse(self.width[i]), i)
    }

    /// Job `i` is done before it ran (carried over from the run it resumes).
    pub fn carried(&mut self, i: usize, passed: bool) {
        self.ready.remove(&self.key(i));
        self.done(i, passed);
    }

    /// Job `i` ended; its dependents move on.
    pub fn done(&mut self, i: usize, passed: bool) {
        let clean = passed && !self.tainted[i];
        for k in std::mem::take(&mut self.dependents[i]) {
            let ordering_only = self.ordering_only.contains(&(i, k));
            if ordering_only && !clean {
                self.tainted[k] = true;
            }
            if clean || ordering_only {
                self.pending[k] -= 1;
                if self.pending[k] == 0 {
                    self.ready.insert(self.key(k));
                }
            } else {
                self.blocked.push((k, i));
            }
        }
    }

    /// The ready jobs, in start order; [`Ready::started`] takes one out.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.ready.iter().map(|&(_, _, i)| i)
    }

    /// The first ready job after `i` in start order (the first of all for `None`): a cursor
    /// that stays valid while jobs start and become ready.
    pub fn next_after(&self, i: Option<usize>) -> Option<usize> {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = i.map_or(Unbounded, |i| Excluded(self.key(i)));
        self.ready
            .range((from, Unbounded))
            .next()
            .map(|&(_, _, i)| i)
    }

    pub fn started(&mut self, i: usize) {
        self.ready.remove(&self.key(i));
    }

    /// Jobs blocked by a dependency that did not pass, with that dependency, once each.
    pub fn take_blocked(&mut self) -> Vec<(usize, usize)> {
        std::mem::take(&mut self.blocked)
    }
}

/// Each job's cost plus the longest critical path among its dependents, for a DAG given by
/// its dependents (jobs on a cycle, which a plan never has, count their own cost only).
fn critical_paths(dependents: &[Vec<usize>], cost: &[u64]) -> Vec<u64> {
    let n = dependents.len();
    // Reverse topological order: a job once every job that waits for it is done.
    let mut waiting: Vec<usize> = dependents.iter().map(Vec::len).collect();
    let mut dependencies = vec![Vec::new(); n];
    for (d, ks) in dependents.iter().enumerate() {
        for &k in ks {
            dependencies[k].push(d);
        }
    }
    let mut path: Vec<u64> = cost.to_vec();
    let mut stack: Vec<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    while let Some(k) = stack.pop() {
        for &d in &dependencies[k] {
            path[d] = path[d].max(cost[d] + path[k]);
            waiting[d] -= 1;
            if waiting[d] == 0 {
                stack.push(d);
            }
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordering_only_edge_lets_its_dependent_run_after_a_failure() {
        // 0 → 1 → 2: with 1 → 2 ordering only, a failed 1 still lets 2 run; a failed 0 blocks 1.
        let mut r = Ready::new(&[vec![], vec![0], vec![1]], &[1, 1, 1], &[1, 1, 1]);
        r.order_only(1, 2);
        r.started(0);
        r.done(0, true);
        r.started(1);
        r.done(1, false);
        assert!(r.take_blocked().is_empty());
        assert_eq!(r.iter().collect::<Vec<_>>(), [2]);
        let mut r = Ready::new(&[vec![], vec![0], vec![1]], &[1, 1, 1], &[1, 1, 1]);
        r.order_only(1, 2);
        r.started(0);
        r.done(0, false);
        assert_eq!(r.take_blocked(), [(1, 0)]);
        // 0 → 1 → 2 with 0 → 1 ordering only: 1 runs after a failed 0 and passes, but 2 (an
        // ordinary edge) is blocked: something before it failed.
        let mut r = Ready::new(&[vec![], vec![0], vec![1]], &[1, 1, 1], &[1, 1, 1]);
        r.order_only(0, 1);
        r.started(0);
        r.done(0, false);
        assert_eq!(r.iter().collect::<Vec<_>>(), [1]);
        r.started(1);
        r.done(1, true);
        assert_eq!(r.take_blocked(), [(2, 1)]);
    }

    #[test]
    fn dependents_become_ready_when_all_dependencies_pass_and_blocked_when_one_fails() {
        // 0 → 1, 0 → 2, {1, 2} → 3
        let mut r = Ready::new(&[vec![], vec![0], vec![0], vec![1, 2]], &[1; 4], &[1; 4]);
        assert_eq!(r.iter().collect::<Vec<_>>(), [0]);
        r.started(0);
        r.done(0, true);
        assert_eq!(r.iter().collect::<Vec<_>>(), [1, 2]);
        r.started(1);
        r.done(1, true);
        assert_eq!(r.iter().collect::<Vec<_>>(), [2]);
        r.started(2);
        r.done(2, false);
        assert_eq!(r.iter().count(), 0);
        assert_eq!(r.take_blocked(), [(3, 2)]);
        assert!(r.take_blocked().is_empty());
    }

    #[test]
    fn the_longest_critical_path_starts_first_then_plan_order() {
        // Two trainings (cost 8): 0 with a chain of two judges after it (1 → 2), 3 with one (4);
        // 5 is a lone judge. 0's path is 10, 3's 9, 5's 1.
        let deps = [vec![], vec![0], vec![1], vec![], vec![3], vec![]];
        let cost = [8, 1, 1, 8, 1, 1];
        assert_eq!(
            critical_paths(&Ready::new(&deps, &cost, &[1; 6]).dependents, &cost),
            [10, 2, 1, 9, 1, 1]
        );
        let mut r = Ready::new(&deps, &cost, &[1; 6]);
        assert_eq!(r.iter().collect::<Vec<_>>(), [0, 3, 5]);
        assert_eq!(r.next_after(None), Some(0));
        assert_eq!(r.next_after(Some(0)), Some(3));
        r.started(0);
        r.done(0, true);
        // Judge 1 (path 2) now goes before the lone judge 5 (path 1), after training 3.
        assert_eq!(r.iter().collect::<Vec<_>>(), [3, 1, 5]);
        assert_eq!(r.next_after(Some(3)), Some(1));
    }

    #[test]
    fn among_equal_paths_the_widest_starts_first() {
        // Three trainings with one judge each; the third takes two slots.
        let deps = [vec![], vec![], vec![], vec![0], vec![1], vec![2]];
        let r = Ready::new(&deps, &[8, 8, 8, 1, 1, 1], &[1, 1, 2, 1, 1, 1]);
        assert_eq!(r.iter().collect::<Vec<_>>(), [2, 0, 1]);
    }
}
