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
    let manifest = Manifest::read(dir)?;
    if manifest.blake3.is_empty() {
        return Err(SealError::Unsealed {
            dir: dir.display().to_string(),
        });
    }
    for (name, want) in &manifest.blake3 {
        let corrupt = |why: String| SealError::Corrupt {
            dir: dir.display().to_string(),
            file: name.clone(),
            why,
        };
        match hash(&dir.join(name)) {
            Ok(got) if &got == want => {}
            Ok(got) => {
                return Err(corrupt(format!(
                    "has changed since it was written (BLAKE3 {} recorded, {} now)",
                    &want[..12.min(want.len())],
                    &got[..12]
                )))
            }
            Err(e) => return Err(corrupt(format!("cannot be read: {e}"))),
        }
    }
    Ok(manifest)
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
}
