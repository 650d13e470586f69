//! A variant's source: a snapshot of one commit of the repository that holds the spec, taken
//! with `git archive` into the cache under the commit's hash. A commit never changes, so a
//! snapshot is made once and shared by every job (and run) that needs it; it is built beside its
//! final place and renamed in, so a half-written one is never used.
//!
//! A snapshot is sealed as cache entries are: the BLAKE3 of every file it holds goes into
//! `<sha>.seal` beside it, and it is verified before each use. An edited file, a removed one or
//! one added (a program planted beside the variant's own) makes it damaged; it is moved aside
//! and made again. Before, an edited snapshot ran as that commit, and an emptied one was never
//! rebuilt. Python's `__pycache__` directories are the one addition allowed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    #[error("variant `{variant}`: {source}")]
    Git { variant: String, source: GitError },
}

/// A git (or tar) step of making a checkout.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: &'static str,
        source: std::io::Error,
    },
    #[error("`git {args}` in {}: {stderr}", dir.display())]
    Failed {
        args: String,
        dir: PathBuf,
        stderr: String,
    },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`git archive {0}` | tar -x failed")]
    Archive(String),
}

impl GitError {
    fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> GitError {
        let path = path.to_path_buf();
        move |source| GitError::Io { what, path, source }
    }

    fn spawn(program: &'static str) -> impl FnOnce(std::io::Error) -> GitError {
        move |source| GitError::Spawn { program, source }
    }
}

/// Where a variant's program lives.
#[derive(Clone, Debug)]
pub struct Checkout {
    /// The snapshot's root (the repository's top level at that commit).
    pub root: PathBuf,
    /// The engine's directory inside it (where the spec's engine directory is in the repo).
    pub base: PathBuf,
}

fn git(dir: &Path, args: &[&str]) -> Result<String, GitError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .map_err(GitError::spawn("git"))?;
    if !out.status.success() {
        return Err(GitError::Failed {
            args: args.join(" "),
            dir: dir.to_path_buf(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The top of the repository holding `dir` and the commit `rev` names there; what is wrong
/// otherwise (no repository, no such commit), for `validate` to say at the variant's line.
pub fn resolve(dir: &Path, rev: &str) -> Result<(PathBuf, String), GitError> {
    let top = PathBuf::from(git(dir, &["rev-parse", "--show-toplevel"])?);
    let top = std::fs::canonicalize(&top).unwrap_or(top);
    let spec = format!("{rev}^{{commit}}");
    let sha = git(&top, &["rev-parse", "--verify", "--end-of-options", &spec])?;
    Ok((top, sha))
}

/// The snapshot of `rev` for an engine defined in `engine_dir`, made under `cache` if missing.
pub fn checkout(
    variant: &str,
    engine_dir: &Path,
    rev: &str,
    cache: &Path,
) -> Result<Checkout, CheckoutError> {
    let fail = |source: GitError| CheckoutError::Git {
        variant: variant.to_owned(),
        source,
    };
    let engine_dir = std::fs::canonicalize(engine_dir)
        .map_err(GitError::io("resolving", engine_dir))
        .map_err(fail)?;
    let (top, sha) = resolve(&engine_dir, rev).map_err(fail)?;
    let rel = engine_dir
        .strip_prefix(&top)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let checkouts = cache.join("checkouts").join(&sha);
    let root = std::path::absolute(&checkouts)
        .map_err(GitError::io("resolving", &checkouts))
        .map_err(fail)?;
    if root.is_dir() && !intact(&root) {
        let aside = meshparity_files::temp_sibling(&root);
        if std::fs::rename(&root, &aside).is_ok() {
            let _ = std::fs::remove_dir_all(&aside);
        }
    }
    if !root.is_dir() {
        let tmp = root.with_extension(format!("partial-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)
            .map_err(GitError::io("creating", &tmp))
            .map_err(fail)?;
        let mut archive = Command::new("git")
            .arg("-C")
            .arg(&top)
            .args(["archive", "--format=tar", &sha])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(GitError::spawn("git archive"))
            .map_err(fail)?;
        let stdout = archive.stdout.take().expect("piped");
        let tar = Command::new("tar")
            .arg("-x")
            .arg("-C")
            .arg(&tmp)
            .stdin(stdout)
            .status()
            .map_err(GitError::spawn("tar"))
            .map_err(fail)?;
        let archived = archive
            .wait()
            .map_err(GitError::spawn("git archive"))
            .map_err(fail)?;
        if !(tar.success() && archived.success()) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(fail(GitError::Archive(sha)));
        }
        let seal = serde_json::to_vec(&hashes(&tmp)).expect("hashes serialize");
        meshparity_files::write_atomic(&seal_of(&root), &seal)
            .map_err(GitError::io("sealing", &root))
            .map_err(fail)?;
        if std::fs::rename(&tmp, &root).is_err() {
            // Another job made it meanwhile: theirs is as good.
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    Ok(Checkout {
        base: root.join(rel),
        root,
    })
}

/// Where the seal of the snapshot at `root` is kept: beside it, out of the program's sight.
fn seal_of(root: &Path) -> PathBuf {
    root.with_extension("seal")
}

/// Every file below `root` (but `__pycache__`) with its BLAKE3, by path relative to `root`.
fn hashes(root: &Path) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                if e.file_name() != "__pycache__" {
                    stack.push(path);
                }
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let hash = if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap_or_default();
                blake3::hash(target.as_os_str().as_encoded_bytes())
            } else {
                let Ok(bytes) = std::fs::read(&path) else {
                    continue;
                };
                blake3::hash(&bytes)
            };
            out.insert(rel, hash.to_hex().to_string());
        }
    }
    out
}

/// Whether the snapshot at `root` holds exactly what its seal says.
fn intact(root: &Path) -> bool {
    let Ok(bytes) = std::fs::read(seal_of(root)) else {
        return false;
    };
    serde_json::from_slice::<std::collections::BTreeMap<String, String>>(&bytes)
        .is_ok_and(|sealed| sealed == hashes(root))
}
