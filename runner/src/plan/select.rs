//! Selection: filter, then partition, then the dependencies of what remains.

use petgraph::graph::NodeIndex;
use serde::Serialize;

use super::build::Plan;
use super::filter::Filter;
use super::partition::Partition;

/// Why a job is in a selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Chosen by the filters and partition.
    Selected,
    /// Not chosen, but a chosen job needs it.
    Dependency,
}

/// Jobs to run, in plan order, each with its role.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub jobs: Vec<(NodeIndex, Role)>,
}

impl Selection {
    pub fn selected(&self) -> impl Iterator<Item = NodeIndex> + '_ {
        self.jobs
            .iter()
            .filter(|(_, r)| *r == Role::Selected)
            .map(|(n, _)| *n)
    }

    pub fn count(&self, role: Role) -> usize {
        self.jobs.iter().filter(|(_, r)| *r == role).count()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

impl Plan {
    pub fn select(&self, filter: &Filter, partition: Option<Partition>) -> Selection {
        let mut role: Vec<Option<Role>> = vec![None; self.len()];
        let filtered = self.jobs().filter(|(_, j)| filter.matches(j));
        for (i, (node, job)) in filtered.enumerate() {
            if partition.is_none_or(|p| p.contains(i, job.id)) {
                role[node.index()] = Some(Role::Selected);
            }
        }
        // Plan order is topological, so walking it backwards visits every job before its
        // dependencies: one pass pulls in the whole closure.
        for i in (0..self.len()).rev() {
            if role[i].is_some() {
                for dep in self.dependencies(NodeIndex::new(i)) {
                    role[dep.index()].get_or_insert(Role::Dependency);
                }
            }
        }
        Selection {
            jobs: role
                .into_iter()
                .enumerate()
                .filter_map(|(i, r)| r.map(|r| (NodeIndex::new(i), r)))
                .collect(),
        }
    }
}
