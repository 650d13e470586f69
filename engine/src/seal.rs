//! Content hashes of an artifact directory: written once the run is complete, verified before
//! anything reuses or judges it. A cache entry that was truncated, bit-flipped or half
//! replaced would otherwise be judged as if an engine had computed it, and show up as a fake
//! parallelism bug.

use std::io::Read;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use crate::artifact::{files, ArtifactError, Manifest};

/// Why a sealed directory cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    #[error("{dir}: has no content hashes (written by an older meshparity, or never finished)")]
    Unsealed { dir: String },
    #[error("{dir}: `{file}` {why}")]
    Corrupt {
        dir: String,
        file: String,
        why: String,
    },
}

/// Record the BLAKE3 of every file under `dir` (but the manifest) in its manifest.
pub fn seal(dir: &Path) -> Result<(), ArtifactError> {
    let mut manifest = Manifest::read(dir)?;
    let mut hashes = IndexMap::new();
    for rel in walk(dir).map_err(|e| io(dir, e))? {
        let name = rel.to_string_lossy().into_owned();
        if name == files::MANIFEST {
            continue;
        }
        let path = dir.join(&rel);
        hashes.insert(name, hash(&path).map_err(|e| io(&path, e))?);
    }
    manifest.blake3 = hashes;
    manifest.write(dir)
}

/// Check every file the manifest hashes; the first that is missing or differs is the error.
pub fn verify(dir: &Path) -> Result<Manifest, SealError> {
    let manifest = sealed(dir)?;
    for (name, want) in &manifest.blake3 {
        check(dir, name, want)?;
    }
    Ok(manifest)
}

/// The manifest of `dir` if it is sealed, without hashing its files: for a reader that checks
/// only the files it reads ([`verify_file`]). A judge reads one or two of a run's artifacts,
/// and hashing all of them (gradients, weights, rank shards) for each of a cell's levels was a
/// fifth of the judges' time on a hidden-512 llama.
pub fn sealed(dir: &Path) -> Result<Manifest, SealError> {
    let manifest = Manifest::read(dir)?;
    if manifest.blake3.is_empty() {
        return Err(SealError::Unsealed {
            dir: dir.display().to_string(),
        });
    }
    Ok(manifest)
}

/// Check the hashes of `name` in `dir`, or of every hashed file under it when it is a
/// directory, against `manifest` (read from `dir`). An unsealed directory (a run's own scratch
/// output, never cached or shared) has no hashes and nothing to check; a sealed one where
/// `name` has none is damaged.
pub fn verify_file(dir: &Path, manifest: &Manifest, name: &str) -> Result<(), SealError> {
    if manifest.blake3.is_empty() {
        return Ok(());
    }
    let prefix = format!("{name}/");
    let mut found = false;
    for (file, want) in &manifest.blake3 {
        if file == name || file.starts_with(&prefix) {
            found = true;
            check(dir, file, want)?;
        }
    }
    if !found && dir.join(name).exists() {
        return Err(SealError::Corrupt {
            dir: dir.display().to_string(),
            file: name.to_owned(),
            why: "is not among the manifest's content hashes".into(),
        });
    }
    Ok(())
}

/// Whether `dir/name` still has the BLAKE3 `want`.
fn check(dir: &Path, name: &str, want: &str) -> Result<(), SealError> {
    let corrupt = |why: String| SealError::Corrupt {
        dir: dir.display().to_string(),
        file: name.to_owned(),
        why,
    };
    match hash(&dir.join(name)) {
        Ok(got) if got == want => Ok(()),
        Ok(got) => Err(corrupt(format!(
            "has changed since it was written (BLAKE3 {} recorded, {} now)",
            &want[..12.min(want.len())],
            &got[..12]
        ))),
        Err(e) => Err(corrupt(format!("cannot be read: {e}"))),
    }
}

fn hash(path: &Path) -> std::io::Result<String> {
    let mut file = meshparity_files::open(path)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// Regular files under `dir`, relative to it, in a stable order.
fn walk(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(dir.join(&rel))? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = rel.join(entry.file_name());
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn io(path: &Path, source: std::io::Error) -> ArtifactError {
    ArtifactError::Io {
        path: path.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flipped_bit_a_truncation_and_a_missing_file_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("shards")).unwrap();
        std::fs::write(d.join("weights.safetensors"), [1u8, 2, 3, 4]).unwrap();
        std::fs::write(d.join("shards/rank0.safetensors"), [5u8; 10]).unwrap();
        Manifest::default().write(d).unwrap();
        assert!(matches!(verify(d), Err(SealError::Unsealed { .. })));
        seal(d).unwrap();
        verify(d).unwrap();
        std::fs::write(d.join("weights.safetensors"), [1u8, 2, 3, 5]).unwrap();
        let err = verify(d).unwrap_err().to_string();
        assert!(err.contains("`weights.safetensors` has changed"), "{err}");
        std::fs::write(d.join("weights.safetensors"), [1u8, 2, 3, 4]).unwrap();
        std::fs::write(d.join("shards/rank0.safetensors"), [5u8; 9]).unwrap();
        assert!(verify(d).unwrap_err().to_string().contains("shards/rank0"));
        std::fs::remove_file(d.join("shards/rank0.safetensors")).unwrap();
        assert!(verify(d)
            .unwrap_err()
            .to_string()
            .contains("cannot be read"));
    }

    #[test]
    fn a_reader_checks_only_the_files_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("shards")).unwrap();
        std::fs::write(d.join("forward.safetensors"), [1u8; 8]).unwrap();
        std::fs::write(d.join("weights.safetensors"), [2u8; 8]).unwrap();
        std::fs::write(d.join("shards/rank0.safetensors"), [3u8; 8]).unwrap();
        Manifest::default().write(d).unwrap();
        // Unsealed: nothing to check, and `sealed` says so.
        let m = Manifest::read(d).unwrap();
        verify_file(d, &m, "forward.safetensors").unwrap();
        assert!(matches!(sealed(d), Err(SealError::Unsealed { .. })));
        seal(d).unwrap();
        let m = sealed(d).unwrap();
        std::fs::write(d.join("weights.safetensors"), [9u8; 8]).unwrap();
        // The damaged weights do not stop a reader of the logits, and stop a reader of them.
        verify_file(d, &m, "forward.safetensors").unwrap();
        let err = verify_file(d, &m, "weights.safetensors")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`weights.safetensors` has changed"), "{err}");
        // A directory name checks every file under it.
        verify_file(d, &m, "shards").unwrap();
        std::fs::write(d.join("shards/rank0.safetensors"), [4u8; 8]).unwrap();
        let err = verify_file(d, &m, "shards").unwrap_err().to_string();
        assert!(err.contains("shards/rank0"), "{err}");
        // A file that appeared after sealing has no hash: damaged, not trusted.
        std::fs::write(d.join("grads.safetensors"), [5u8; 8]).unwrap();
        let err = verify_file(d, &m, "grads.safetensors")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not among the manifest's content hashes"),
            "{err}"
        );
    }
}
