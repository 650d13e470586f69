//! What a job's verdict was judged under, as one hash kept in its record.
//!
//! A run directory's log holds one record per job; `--resume` keeps those that passed. Job ids
//! name what a job computes (model, mesh, level), not the limits it was judged under, so a
//! record judged under a loose tolerance table once passed a resumed run whose table was
//! tight: the old verdict, never recomputed. A record now counts only where its fingerprint is
//! the job's fingerprint in the resuming run, else the job runs again.
//!
//! The fingerprint covers everything a verdict depends on:
//! - the job as planned (its kind, model and mesh configurations, training settings, limits,
//!   device, variant), and, transitively, the fingerprints of the jobs it depends on;
//! - the binary that judged it ([`build_identity`]: another build may compute other bits);
//! - for a job of a user's program (a command engine, a git variant): every spec file's text
//!   (the engine's argv, environment and artifact map live there) and the files its argv
//!   names that exist (the training script), whose edits change what the program computes.

use std::collections::HashMap;
use std::path::Path;

use meshparity_specs::Spec;
use petgraph::graph::NodeIndex;

use crate::plan::Plan;

/// The longest program file whose bytes are hashed; a larger one counts by its size and time.
const PROGRAM_FILE_BYTES: u64 = 16 << 20;

/// The parts of every fingerprint that are the same for the whole run.
#[derive(Clone, Debug, Default)]
pub struct Basis {
    /// [`build_identity`], hashed.
    build: [u8; 32],
    /// The spec files' text and the program files their engines name (command-engine and
    /// variant jobs only).
    programs: [u8; 32],
}

impl Basis {
    pub fn of(spec: &Spec) -> Basis {
        let mut programs = blake3::Hasher::new();
        for file in &spec.files {
            programs.update(file.path.display().to_string().as_bytes());
            programs.update(&[0]);
            programs.update(file.text.as_bytes());
            programs.update(&[0]);
        }
        for engine in spec.engines.values() {
            let base = engine.base_dir();
            let words = std::iter::once(&engine.program).chain(&engine.args);
            for word in words {
                program_file(&mut programs, &base, &word.value);
            }
        }
        Basis {
            build: *blake3::hash(build_identity().as_bytes()).as_bytes(),
            programs: *programs.finalize().as_bytes(),
        }
    }
}

/// A word of an engine's argv that names an existing regular file (`train.py`, relative to the
/// engine's file or absolute): its bytes, or past [`PROGRAM_FILE_BYTES`] its size and time.
fn program_file(h: &mut blake3::Hasher, base: &Path, word: &str) {
    if word.contains("{{") || word.is_empty() || word.len() > 4096 {
        return;
    }
    let path = base.join(word);
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        return;
    };
    if !meta.is_file() {
        return;
    }
    h.update(path.display().to_string().as_bytes());
    if meta.len() <= PROGRAM_FILE_BYTES {
        if let Ok(bytes) = meshparity_files::read(
            &path,
            meshparity_files::Limit {
                bytes: PROGRAM_FILE_BYTES,
                what: "a program file",
            },
        ) {
            h.update(&bytes);
            return;
        }
    }
    h.update(&meta.len().to_le_bytes());
    if let Ok(t) = meta.modified() {
        h.update(format!("{t:?}").as_bytes());
    }
}

/// This binary as a cache key: its version, size and modification time. A rebuild changes
/// them, so another build's artifacts and verdicts are never taken for this one's.
pub fn build_identity() -> String {
    let mut id = env!("CARGO_PKG_VERSION").to_owned();
    if let Ok(exe) = std::env::current_exe().and_then(std::fs::metadata) {
        id.push_str(&format!(" {}", exe.len()));
        if let Ok(t) = exe.modified() {
            id.push_str(&format!(" {t:?}"));
        }
    }
    id
}

/// Fingerprints of a plan's jobs, each computed once (a job's includes its dependencies').
pub struct Fingerprints<'a> {
    plan: &'a Plan,
    basis: Basis,
    memo: HashMap<NodeIndex, String>,
}

impl<'a> Fingerprints<'a> {
    pub fn new(plan: &'a Plan, basis: Basis) -> Self {
        Self {
            plan,
            basis,
            memo: HashMap::new(),
        }
    }

    /// The fingerprint of `node`, as 32 hex digits.
    pub fn of(&mut self, node: NodeIndex) -> String {
        if let Some(f) = self.memo.get(&node) {
            return f.clone();
        }
        // Dependencies first, without recursion: a deep chain must not exhaust the stack.
        let mut stack = vec![node];
        while let Some(&n) = stack.last() {
            let pending: Vec<NodeIndex> = self
                .plan
                .dependencies(n)
                .into_iter()
                .filter(|d| !self.memo.contains_key(d))
                .collect();
            if pending.is_empty() {
                stack.pop();
                let f = self.compute(n);
                self.memo.insert(n, f);
            } else {
                stack.extend(pending);
            }
        }
        self.memo[&node].clone()
    }

    fn compute(&self, node: NodeIndex) -> String {
        let job = &self.plan.graph[node];
        let mut h = blake3::Hasher::new();
        h.update(&self.basis.build);
        h.update(&serde_json::to_vec(job).expect("jobs serialize"));
        if job.model_config.engine.is_some() || job.variant.is_some() {
            h.update(&self.basis.programs);
        }
        let mut deps: Vec<&String> = self
            .plan
            .dependencies(node)
            .iter()
            .map(|d| &self.memo[d])
            .collect();
        deps.sort();
        for d in deps {
            h.update(d.as_bytes());
        }
        h.finalize().to_hex()[..32].to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshparity_specs::{load_text, Disk};

    fn plan(text: &str) -> Plan {
        let spec = load_text(Path::new("s.toml"), text.into(), &Disk)
            .unwrap()
            .spec;
        Plan::build(&spec)
    }

    const SPEC: &str = "[models.tiny]\n[meshes.tp2]\ntp = 2\n[mutations]\nselect = []\n";

    /// A tighter table changes the fingerprint of the checks it gates and of what is judged
    /// after them (not their ids), never of the runs they read; the same spec planned twice
    /// gives the same fingerprints.
    #[test]
    fn a_limit_changes_the_fingerprint_of_what_it_gates() {
        let plain = format!("{SPEC}[tolerances.default]\nextends = \"builtin\"\n");
        let tight = format!("{plain}forward.f32 = {{ relative_l2 = 1e-30 }}\n");
        let (a, b, c) = (plan(&plain), plan(&plain), plan(&tight));
        let prints = |p: &Plan| -> HashMap<String, (String, String)> {
            let mut f = Fingerprints::new(p, Basis::default());
            p.jobs()
                .map(|(n, j)| (j.name.clone(), (j.id.to_string(), f.of(n))))
                .collect()
        };
        let (a, b, c) = (prints(&a), prints(&b), prints(&c));
        assert_eq!(a, b);
        let mut changed: Vec<&String> = Vec::new();
        for (name, (id, print)) in &a {
            assert_eq!(&c[name].0, id, "{name}: the id does not move");
            if &c[name].1 != print {
                changed.push(name);
            }
        }
        changed.sort();
        assert!(
            changed.iter().any(|n| n.ends_with("/forward")),
            "{changed:?}"
        );
        let kept = ["/reference", "/train", "/roundtrip"];
        assert!(
            !changed.iter().any(|n| kept.iter().any(|k| n.ends_with(k))),
            "{changed:?}"
        );
    }
}
