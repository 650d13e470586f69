//! A run directory: unique, held by one process at a time, and tied to the spec it ran.
//!
//! Two runs started in the same second must not share a directory (their results would mix),
//! a second runner must not `--resume` a directory another one is writing, and a directory
//! made from one spec must not lend its passes to another spec by `--resume`.

use std::path::{Path, PathBuf};

use meshparity_files::{Limit, Lock, LockError};
use meshparity_specs::Spec;
use serde::{Deserialize, Serialize};

/// The spec files a run was made from, with their hashes, in the run directory.
pub const SPEC_FILES: &str = "spec-files.json";

/// The run's scratch directory inside it: artifacts of engines whose runs are never reused, and
/// the reference traces its mutation jobs share.
pub const SCRATCH: &str = "artifacts";

/// A run directory this process holds.
#[derive(Debug)]
pub struct RunDir {
    pub path: PathBuf,
    _lock: Lock,
}

#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error(transparent)]
    Locked(#[from] LockError),
    #[error("cannot create run directory `{path}`: {source}", path = path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "`{dir}` was made from another spec: {changes}; resume with the spec it ran, start a \
         new run, or pass --resume-force to keep its results anyway",
        dir = dir.display()
    )]
    SpecChanged { dir: PathBuf, changes: String },
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct SpecFile {
    path: String,
    blake3: String,
}

impl RunDir {
    /// End of the run: drop the reference traces its mutation jobs shared (read by them only;
    /// every localization is in the results) unless `keep_artifacts`, and measure what the
    /// directory holds.
    pub fn finish(&self, keep_artifacts: bool) -> u64 {
        if !keep_artifacts {
            crate::worker::drop_shared_traces(&self.path.join(SCRATCH));
        }
        disk_use(&self.path)
    }

    /// A new directory `OUTPUT/NAME-STAMP`, or `…-2`, `…-3` when another run took that name.
    pub fn create_unique(output: &Path, name: &str, stamp: &str) -> Result<RunDir, RunDirError> {
        let create = |path: &Path, source| RunDirError::Create {
            path: path.to_owned(),
            source,
        };
        std::fs::create_dir_all(output).map_err(|e| create(output, e))?;
        for n in 1u32.. {
            let path = match n {
                1 => output.join(format!("{name}-{stamp}")),
                n => output.join(format!("{name}-{stamp}-{n}")),
            };
            match std::fs::create_dir(&path) {
                Ok(()) => return Self::hold(path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(create(&path, e)),
            }
        }
        unreachable!("some suffix is free")
    }

    /// `path` as given (`--run-dir`, `--resume`), created if need be.
    pub fn open(path: &Path) -> Result<RunDir, RunDirError> {
        std::fs::create_dir_all(path).map_err(|source| RunDirError::Create {
            path: path.to_owned(),
            source,
        })?;
        Self::hold(path.to_owned())
    }

    fn hold(path: PathBuf) -> Result<RunDir, RunDirError> {
        let lock = Lock::acquire(&path)?;
        Ok(RunDir { path, _lock: lock })
    }

    /// Record which spec files this run reads, for a later `--resume` to check.
    pub fn record_spec(&self, spec: &Spec) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(&spec_files(spec)).expect("hashes serialize");
        meshparity_files::write_atomic(&self.path.join(SPEC_FILES), &bytes)
    }

    /// Whether `spec` is the one this directory ran (every file, includes too). A directory
    /// without the record (older meshparity) passes: there is nothing to compare. A record that
    /// cannot be read is not a pass.
    pub fn check_spec(&self, spec: &Spec) -> Result<(), RunDirError> {
        let path = self.path.join(SPEC_FILES);
        if !path.exists() {
            return Ok(());
        }
        let changed = |why: String| RunDirError::SpecChanged {
            dir: self.path.clone(),
            changes: format!("its record `{SPEC_FILES}` {why}"),
        };
        let bytes = meshparity_files::read(&path, Limit::JSON)
            .map_err(|e| changed(format!("cannot be read ({e})")))?;
        let before: Vec<SpecFile> =
            serde_json::from_slice(&bytes).map_err(|e| changed(format!("is damaged ({e})")))?;
        let now = spec_files(spec);
        let mut changes = Vec::new();
        for f in &now {
            match before.iter().find(|b| b.path == f.path) {
                None => changes.push(format!("`{}` was not part of it", f.path)),
                Some(b) if b.blake3 != f.blake3 => changes.push(format!("`{}` changed", f.path)),
                Some(_) => {}
            }
        }
        for b in &before {
            if !now.iter().any(|f| f.path == b.path) {
                changes.push(format!("`{}` is no longer read", b.path));
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        Err(RunDirError::SpecChanged {
            dir: self.path.clone(),
            changes: changes.join(", "),
        })
    }
}

fn spec_files(spec: &Spec) -> Vec<SpecFile> {
    spec.files
        .iter()
        .map(|f| SpecFile {
            path: std::fs::canonicalize(&f.path)
                .unwrap_or_else(|_| f.path.clone())
                .display()
                .to_string(),
            blake3: blake3::hash(f.text.as_bytes()).to_hex().to_string(),
        })
        .collect()
}

/// Bytes allocated on disk below `path` (as `du`), links not followed and a hard-linked file
/// counted once.
pub fn disk_use(path: &Path) -> u64 {
    disk_use_once(path, &mut std::collections::HashSet::new())
}

fn disk_use_once(path: &Path, seen: &mut std::collections::HashSet<(u64, u64)>) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.nlink() > 1 && !meta.is_dir() && !seen.insert((meta.dev(), meta.ino())) {
        return 0;
    }
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            total += entries
                .flatten()
                .map(|e| disk_use_once(&e.path(), seen))
                .sum::<u64>();
        }
    }
    total
}
