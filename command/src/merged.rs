//! The merged state a program writes (its weights and, where the spec maps it, its optimizer's
//! state, in world-size-1 names) read from the directory it was given, and the file helpers a
//! pair's run and the reference's saved states share: its own module, so `resume` and `states`
//! use it without importing each other.

use std::path::Path;

use meshparity_engine::{checkpoint, EngineError, Shards};
use meshparity_specs::ArtifactMap;

use crate::collect;
use crate::CommandEngine;

/// Why a pair's run could not be joined from what the program wrote.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResumeError {
    #[error("the program wrote no `{file}` (artifacts.{key}) into {{{{{value}}}}} = {dir}; command: {argv}")]
    NotWritten {
        file: String,
        key: &'static str,
        value: &'static str,
        dir: String,
        argv: String,
    },
    #[error("`{path}` (artifacts.{key}): {message}")]
    Malformed {
        path: String,
        key: &'static str,
        message: String,
    },
    #[error("`{name}` is in both the weights and the optimizer's state in {dir}: name the optimizer's entries apart (e.g. `exp_avg.{name}`)")]
    Clash { name: String, dir: String },
    #[error("the merged state in {dir} holds no tensor")]
    Empty { dir: String },
    #[error("the saving run's curve must hold steps 1..={at} and the resumed run's the steps after {at}, once each; together they hold {steps:?}")]
    Steps { at: u64, steps: Vec<u64> },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error(transparent)]
    Collect(collect::CollectError),
}

/// `dir` and its parents, as a job error.
pub(crate) fn create(dir: &Path) -> Result<(), EngineError> {
    std::fs::create_dir_all(dir).map_err(EngineError::io("creating", dir))
}

/// `bytes` into `path`, replacing (not following) a link there.
pub(crate) fn put(path: &Path, bytes: &[u8]) -> Result<(), EngineError> {
    meshparity_files::write(path, bytes).map_err(EngineError::io("writing", path))
}

/// A job error of `engine`'s.
pub(crate) fn fail(
    engine: &CommandEngine,
    e: impl std::error::Error + Send + Sync + 'static,
) -> EngineError {
    EngineError::program(&engine.def.name.value, e)
}

/// The merged state the program wrote into `dir` (`what`, the template value that named it):
/// the weights, and the optimizer's state where the spec maps it, as one set of tensors.
pub(crate) fn merged(
    map: &ArtifactMap,
    dir: &Path,
    value: &'static str,
    argv: &str,
) -> Result<Shards, ResumeError> {
    let mut all = Shards::new();
    let keys = [("weights", &map.weights), ("optimizer", &map.optimizer)];
    for (key, file) in keys {
        let Some(file) = file else { continue };
        // A regular file the program wrote there, never a link it planted (collect's rule).
        let path = match collect::found(dir, state_name(&file.value), key, argv) {
            Ok(path) => path,
            Err(collect::CollectError::Missing { .. }) => {
                return Err(ResumeError::NotWritten {
                    file: file.value.clone(),
                    key,
                    value,
                    dir: dir.display().to_string(),
                    argv: argv.to_owned(),
                })
            }
            Err(e) => return Err(ResumeError::Collect(e)),
        };
        let tensors = checkpoint::load(&path).map_err(|e| ResumeError::Malformed {
            path: path.display().to_string(),
            key,
            message: e.to_string(),
        })?;
        for (name, t) in tensors {
            if all.insert(name.clone(), t).is_some() {
                let dir = dir.display().to_string();
                return Err(ResumeError::Clash { name, dir });
            }
        }
    }
    if all.is_empty() {
        let dir = dir.display().to_string();
        return Err(ResumeError::Empty { dir });
    }
    Ok(all)
}

/// A state file's name in the directory it was given, by the name the spec maps: only its
/// file name counts (the program writes it straight into that directory).
fn state_name(name: &str) -> &str {
    Path::new(name)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merged state is read only from regular files the program wrote where it was told:
    /// a link it planted there (to a file outside, which would pass as the state) is refused,
    /// and a missing file names the template value.
    #[test]
    fn the_merged_state_is_never_read_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("elsewhere.safetensors");
        let one: Shards = [(
            "w".to_owned(),
            meshparity_engine::HostTensor {
                dtype: meshparity_compare::TensorDtype::F32,
                shape: vec![1],
                bytes: 1f32.to_le_bytes().to_vec(),
            },
        )]
        .into_iter()
        .collect();
        checkpoint::save(&outside, &one).unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        let file = meshparity_specs::source::SourceFile::new("spec.toml", "");
        let at = meshparity_specs::source::Loc::new(&file, 0..0);
        let map = ArtifactMap {
            weights: Some(meshparity_specs::source::Located::new(
                "final.safetensors".into(),
                at,
            )),
            ..ArtifactMap::default()
        };
        let e = merged(&map, &state, "loaded_dir", "prog")
            .unwrap_err()
            .to_string();
        assert!(e.contains("into {{loaded_dir}}"), "{e}");
        std::os::unix::fs::symlink(&outside, state.join("final.safetensors")).unwrap();
        let e = merged(&map, &state, "loaded_dir", "prog")
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        std::fs::remove_file(state.join("final.safetensors")).unwrap();
        checkpoint::save(&state.join("final.safetensors"), &one).unwrap();
        assert_eq!(merged(&map, &state, "loaded_dir", "prog").unwrap(), one);
    }
}
