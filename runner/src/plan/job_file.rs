//! A job file: one job with everything its worker needs (itself and the jobs it depends on,
//! transitively, with their edges), written by the runner into the attempt's directory.
//!
//! Without it every worker re-loaded and re-planned the whole spec to find its job: 8 ms on a
//! 204-job spec, 240 ms on a 100,000-job one, for every job. With it a worker's start costs
//! the same whatever the sweep's size, and the job it runs is exactly the one the runner
//! planned, even if the spec file changed since.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use petgraph::graph::NodeIndex;
use serde::{Deserialize, Serialize};

use super::{Job, Plan};

/// The file's name in an attempt directory.
pub const JOB_FILE: &str = "job.json";
const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
pub struct JobFile {
    pub format: u32,
    /// The spec the job came from (engines that need more of it, a command engine's
    /// `[engines]` and `[variants]`, read it there).
    pub spec: PathBuf,
    pub spec_name: String,
    /// `jobs[0]` is the job to run; the rest its dependencies, transitively.
    pub jobs: Vec<Job>,
    /// `(from, to)` indices into `jobs`: `to` depends on `from`.
    pub edges: Vec<(usize, usize)>,
}

impl JobFile {
    /// The file for `node` of `plan`.
    pub fn of(plan: &Plan, node: NodeIndex, spec: &Path) -> JobFile {
        let mut index: HashMap<NodeIndex, usize> = HashMap::new();
        let mut order = vec![node];
        index.insert(node, 0);
        let mut edges = Vec::new();
        let mut i = 0;
        while i < order.len() {
            let n = order[i];
            for d in plan.dependencies(n) {
                let k = *index.entry(d).or_insert_with(|| {
                    order.push(d);
                    order.len() - 1
                });
                edges.push((k, i));
            }
            i += 1;
        }
        JobFile {
            format: FORMAT,
            spec: spec.to_owned(),
            spec_name: plan.spec_name.clone(),
            jobs: order.iter().map(|n| plan.graph[*n].clone()).collect(),
            edges,
        }
    }

    /// The plan of this job and its dependencies, and the job's node in it.
    pub fn plan(self) -> (Plan, NodeIndex) {
        let mut plan = Plan::empty(self.spec_name);
        let nodes: Vec<NodeIndex> = self.jobs.into_iter().map(|j| plan.add(j, &[])).collect();
        for (from, to) in self.edges {
            plan.graph.add_edge(nodes[from], nodes[to], ());
        }
        (plan, nodes[0])
    }

    pub fn read(path: &Path) -> Result<JobFile, JobFileError> {
        let path_buf = || path.to_path_buf();
        let bytes =
            meshparity_files::read(path, meshparity_files::Limit::JSON).map_err(|source| {
                JobFileError::Read {
                    path: path_buf(),
                    source,
                }
            })?;
        let file: JobFile =
            serde_json::from_slice(&bytes).map_err(|source| JobFileError::Decode {
                path: path_buf(),
                source,
            })?;
        if file.format != FORMAT || file.jobs.is_empty() {
            return Err(JobFileError::Format {
                path: path_buf(),
                format: file.format,
            });
        }
        Ok(file)
    }

    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).expect("job files serialize");
        meshparity_files::write_replace(path, &bytes)
    }
}

/// Why a job file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JobFileError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a job file: {source}", path.display())]
    Decode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: job file format {format} (this meshparity writes {FORMAT})", path.display())]
    Format { path: PathBuf, format: u32 },
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshparity_specs::{load_text, Disk};

    #[test]
    fn a_job_file_carries_the_job_and_its_dependencies() {
        let spec = "[models.tiny]\n[meshes.tp2]\ntp = 2\n[mutations]\nselect = [\"all\"]\n";
        let spec = load_text(Path::new("s.toml"), spec.into(), &Disk)
            .unwrap()
            .spec;
        let plan = Plan::build(&spec);
        let (node, job) = plan
            .jobs()
            .find(|(_, j)| j.name.ends_with("/oracle"))
            .unwrap();
        let file = JobFile::of(&plan, node, Path::new("s.toml"));
        let text = serde_json::to_string(&file).unwrap();
        let (mini, n) = serde_json::from_str::<JobFile>(&text).unwrap().plan();
        assert_eq!(mini.graph[n].id, job.id);
        assert_eq!(mini.graph[n].limits, job.limits);
        // The oracle check follows the curve check, which follows ..., the training, the
        // reference: the same chain as in the full plan.
        let chain = |p: &Plan, n: NodeIndex| {
            let mut names = Vec::new();
            let mut stack = vec![n];
            while let Some(n) = stack.pop() {
                for d in p.dependencies(n) {
                    names.push(p.graph[d].name.clone());
                    stack.push(d);
                }
            }
            names.sort();
            names.dedup();
            names
        };
        assert_eq!(chain(&mini, n), chain(&plan, node));
        assert!(mini.len() < plan.len());
    }
}
