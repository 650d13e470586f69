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
    #[error(
        "`{dir}` holds another run ({what}); a run directory is one run: name a new directory, \
         continue that run with --resume, or pass --force to clear it first",
        dir = dir.display()
    )]
    HoldsRun { dir: PathBuf, what: String },
    #[error(
        "`{dir}` is not empty and is not a meshparity run directory (it holds {what}); name a \
         new or empty directory",
        dir = dir.display()
    )]
    NotEmpty { dir: PathBuf, what: String },
    #[error("clearing `{path}` (--force): {source}", path = path.display())]
    Clear {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "`{path}` in the run directory is {what}; a run directory's files are the run's own \
         (remove it, or start a new run)",
        path = path.display()
    )]
    Planted { path: PathBuf, what: &'static str },
}

/// The copy of the spec files a run keeps, so that its reproduce lines run from the run
/// directory alone (a CI artifact downloaded elsewhere).
pub const SPEC_COPY: &str = "spec";

/// What a run writes into its directory: a directory holding any of them holds a run.
const RUN_ENTRIES: &[&str] = &[
    crate::exec::store::RESULTS_LOG,
    SPEC_FILES,
    "results.json",
    "jobs",
    SCRATCH,
    SPEC_COPY,
];

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct SpecFile {
    path: String,
    blake3: String,
}

impl RunDir {
    /// End of the run: drop the reference traces its mutation jobs shared (read by them only;
    /// every localization is in the results) unless `keep_artifacts`, and the shared copies no
    /// file links any more; measure what the directory holds.
    pub fn finish(&self, keep_artifacts: bool) -> u64 {
        if !keep_artifacts {
            crate::worker::drop_shared_traces(&self.path.join(SCRATCH));
        }
        crate::worker::drop_unlinked(&self.path.join(SCRATCH).join(crate::worker::BLOBS));
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

    /// `path` as given to `--resume`: a run to continue. Its entries the run writes into must
    /// be its own: a link planted in their place is refused, not written through.
    pub fn open(path: &Path) -> Result<RunDir, RunDirError> {
        std::fs::create_dir_all(path).map_err(|source| RunDirError::Create {
            path: path.to_owned(),
            source,
        })?;
        let dir = Self::hold(path.to_owned())?;
        dir.refuse_planted()?;
        Ok(dir)
    }

    /// `path` as given to `--run-dir`, for a new run: created if need be, and empty. One that
    /// holds another run is refused (its records would mix with this run's, and `--resume`
    /// would take them for this run's), or cleared first with `force`; one that holds
    /// anything else is refused whatever `force` says.
    pub fn open_new(path: &Path, force: bool) -> Result<RunDir, RunDirError> {
        let dir = Self::open(path)?;
        let entries: Vec<std::fs::DirEntry> = std::fs::read_dir(path)
            .map_err(|source| RunDirError::Create {
                path: path.to_owned(),
                source,
            })?
            .flatten()
            .filter(|e| e.file_name() != meshparity_files::LOCK_FILE)
            .collect();
        if entries.is_empty() {
            return Ok(dir);
        }
        let names: Vec<String> = entries
            .iter()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let shown = |names: &[String]| {
            let mut list: Vec<String> = names.iter().take(5).map(|n| format!("`{n}`")).collect();
            if names.len() > 5 {
                list.push(format!("and {} more", names.len() - 5));
            }
            list.join(", ")
        };
        let run: Vec<String> = names
            .iter()
            .filter(|n| RUN_ENTRIES.contains(&n.as_str()))
            .cloned()
            .collect();
        if run.is_empty() {
            return Err(RunDirError::NotEmpty {
                dir: path.to_owned(),
                what: shown(&names),
            });
        }
        if !force {
            return Err(RunDirError::HoldsRun {
                dir: path.to_owned(),
                what: shown(&run),
            });
        }
        for e in entries {
            let p = e.path();
            let cleared = match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p),
                Ok(_) => std::fs::remove_file(&p),
                Err(e) => Err(e),
            };
            cleared.map_err(|source| RunDirError::Clear { path: p, source })?;
        }
        Ok(dir)
    }

    /// The run's own entries are what they seem: `jobs/` and the scratch directory are
    /// directories, the logs and records regular files, none a link. A link planted there was
    /// written through (`results.jsonl`'s target appended to).
    fn refuse_planted(&self) -> Result<(), RunDirError> {
        for name in RUN_ENTRIES {
            let path = self.path.join(name);
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let kind = meta.file_type();
            let dir_wanted = ["jobs", SCRATCH, SPEC_COPY].contains(name);
            let what = if kind.is_symlink() {
                "a symbolic link"
            } else if dir_wanted && !kind.is_dir() {
                "not a directory"
            } else if !dir_wanted && !kind.is_file() {
                "not a regular file"
            } else {
                continue;
            };
            return Err(RunDirError::Planted { path, what });
        }
        Ok(())
    }

    fn hold(path: PathBuf) -> Result<RunDir, RunDirError> {
        let lock = Lock::acquire(&path)?;
        Ok(RunDir { path, _lock: lock })
    }

    /// Record which spec files this run reads, for a later `--resume` to check, and keep a
    /// copy of them in `spec/` (includes where they lie relative to the top spec's common
    /// directory with them). Returns the top spec's copy, relative to the run directory: the
    /// path every job's reproduce line names.
    pub fn record_spec(&self, spec: &Spec) -> std::io::Result<PathBuf> {
        let bytes = serde_json::to_vec_pretty(&spec_files(spec)).expect("hashes serialize");
        meshparity_files::write_atomic(&self.path.join(SPEC_FILES), &bytes)?;
        let copy = self.path.join(SPEC_COPY);
        if std::fs::symlink_metadata(&copy).is_ok() {
            std::fs::remove_dir_all(&copy)?;
        }
        let paths: Vec<PathBuf> = spec
            .files
            .iter()
            .map(|f| std::path::absolute(&f.path).unwrap_or_else(|_| f.path.clone()))
            .collect();
        let root = common_dir(&paths);
        let mut top = None;
        for (file, path) in spec.files.iter().zip(&paths) {
            let rel = path.strip_prefix(&root).unwrap_or(path);
            let dest = copy.join(rel);
            std::fs::create_dir_all(dest.parent().unwrap_or(&copy))?;
            meshparity_files::write_atomic(&dest, file.text.as_bytes())?;
            top.get_or_insert_with(|| Path::new(SPEC_COPY).join(rel));
        }
        Ok(top.unwrap_or_else(|| PathBuf::from(SPEC_COPY)))
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

/// The deepest directory holding every path (each a file).
fn common_dir(paths: &[PathBuf]) -> PathBuf {
    let mut root: Option<PathBuf> = None;
    for p in paths {
        let dir = p.parent().unwrap_or(Path::new("/")).to_path_buf();
        root = Some(match root {
            None => dir,
            Some(r) => r
                .ancestors()
                .find(|a| dir.starts_with(a))
                .unwrap_or(Path::new("/"))
                .to_path_buf(),
        });
    }
    root.unwrap_or_default()
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
