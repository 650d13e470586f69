//! Which jobs may start: dependency counts and a ready set, so an event costs the jobs it
//! touches, not a scan of the whole run (a 100,000-job sweep would otherwise spend its time
//! re-checking jobs that cannot start).

use std::collections::BTreeSet;

/// Jobs by their index in the run's order (plan order, which is also the start priority).
pub struct Ready {
    /// Unfinished dependencies of each job.
    pending: Vec<usize>,
    dependents: Vec<Vec<usize>>,
    /// Jobs whose dependencies all passed, not yet started, lowest index first.
    ready: BTreeSet<usize>,
    /// Jobs a dependency of which did not pass, with its index: they are skipped, not run.
    blocked: Vec<(usize, usize)>,
}

impl Ready {
    /// `deps[i]`: the indices job `i` depends on (within the run).
    pub fn new(deps: &[Vec<usize>]) -> Self {
        let mut dependents = vec![Vec::new(); deps.len()];
        for (i, ds) in deps.iter().enumerate() {
            for &d in ds {
                dependents[d].push(i);
            }
        }
        let pending: Vec<usize> = deps.iter().map(Vec::len).collect();
        let ready = (0..deps.len()).filter(|&i| pending[i] == 0).collect();
        Self {
            pending,
            dependents,
            ready,
            blocked: Vec::new(),
        }
    }

    /// Job `i` is done before it ran (carried over from the run it resumes).
    pub fn carried(&mut self, i: usize, passed: bool) {
        self.ready.remove(&i);
        self.done(i, passed);
    }

    /// Job `i` ended; its dependents move on.
    pub fn done(&mut self, i: usize, passed: bool) {
        for k in std::mem::take(&mut self.dependents[i]) {
            if passed {
                self.pending[k] -= 1;
                if self.pending[k] == 0 {
                    self.ready.insert(k);
                }
            } else {
                self.blocked.push((k, i));
            }
        }
    }

    /// The ready jobs, in order; [`Ready::started`] takes one out.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.ready.iter().copied()
    }

    /// The first ready job at or after `i`.
    pub fn first_from(&self, i: usize) -> Option<usize> {
        self.ready.range(i..).next().copied()
    }

    pub fn started(&mut self, i: usize) {
        self.ready.remove(&i);
    }

    /// Jobs blocked by a dependency that did not pass, with that dependency, once each.
    pub fn take_blocked(&mut self) -> Vec<(usize, usize)> {
        std::mem::take(&mut self.blocked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependents_become_ready_when_all_dependencies_pass_and_blocked_when_one_fails() {
        // 0 → 1, 0 → 2, {1, 2} → 3
        let mut r = Ready::new(&[vec![], vec![0], vec![0], vec![1, 2]]);
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
}
