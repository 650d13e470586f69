//! A user's per-site traces → the trace artifact that localization reads
//! (`meshparity_engine::locate`).
//!
//! Asked to trace (`{{trace_dir}}` set), the program writes into that directory:
//! - `sites.txt`: the names of the values it traced (`embed.out`, `layers.3.mlp.out`,
//!   `grad.layers.3.w1`...), one per line, in the order it computed them;
//! - `step{S}.safetensors` for S = 0, 1, ...: each site's value at that step, whole-batch and
//!   unsharded (what a world-size-1 run holds: gathered over TP, concatenated over DP), the way
//!   ART's forward trace capture writes per-module outputs.
//!
//! Localization then walks the sites step by step in that order and names the first whose
//! relative L2 to the reference's exceeds the dtype's limit. Names starting with `grad.` are
//! gradients, names with `.bwd.` backward values, the rest forward values.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use meshparity_engine::locate::{write_trace, TraceEntry};
use meshparity_engine::{HostTensor, TraceIndex};

/// Why a program's traces could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceFilesError {
    #[error("{path}: the program wrote no site list; write the traced value names there, one per line, in the order they were computed")]
    NoSites { path: PathBuf },
    #[error(
        "{path}: the program wrote no traces (expected step0.safetensors, step1.safetensors, ...)"
    )]
    NoSteps { path: PathBuf },
    #[error("{path}: tensor `{name}` is not in sites.txt; list it there (in computation order) or do not write it")]
    Unlisted { path: PathBuf, name: String },
    #[error("{path}: {message}")]
    Read { path: PathBuf, message: String },
}

/// Read the program's traces in `from` and write the trace artifact into `to`.
pub fn convert(from: &Path, to: &Path) -> Result<usize, TraceFilesError> {
    let list = from.join("sites.txt");
    let read = |path: &Path, message: String| TraceFilesError::Read {
        path: path.to_path_buf(),
        message,
    };
    let limit = meshparity_files::Limit {
        bytes: 16 << 20,
        what: "a site list",
    };
    // A regular file, bounded: a FIFO or a runaway writer is an error, never a hang.
    let sites: Vec<String> = match meshparity_files::read_to_string(&list, limit) {
        Ok(text) => text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TraceFilesError::NoSites { path: list })
        }
        Err(e) => return Err(read(&list, e.to_string())),
    };
    if sites.is_empty() {
        return Err(TraceFilesError::NoSites { path: list });
    }
    let mut index = TraceIndex {
        microbatches: 1,
        entries: Vec::new(),
    };
    let mut tensors: IndexMap<String, HostTensor> = IndexMap::new();
    for step in 0.. {
        let path = from.join(format!("step{step}.safetensors"));
        if !path.exists() {
            if step == 0 {
                return Err(TraceFilesError::NoSteps {
                    path: from.to_path_buf(),
                });
            }
            break;
        }
        let mut values =
            meshparity_engine::checkpoint::load(&path).map_err(|e| read(&path, e.to_string()))?;
        if let Some(name) = values.keys().find(|n| !sites.contains(n)) {
            return Err(TraceFilesError::Unlisted {
                path,
                name: name.clone(),
            });
        }
        for site in &sites {
            if let Some(t) = values.swap_remove(site) {
                let key = format!("s{step}.{site}");
                index.entries.push(TraceEntry {
                    key: key.clone(),
                    like: key.clone(),
                    blocks: 1,
                });
                tensors.insert(key, t);
            }
        }
    }
    write_trace(to, &index, &tensors).map_err(|e| read(to, e.to_string()))?;
    Ok(index.entries.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshparity_compare::TensorDtype;

    fn tensor(v: f32) -> HostTensor {
        HostTensor {
            dtype: TensorDtype::F32,
            shape: vec![1],
            bytes: v.to_le_bytes().to_vec(),
        }
    }

    fn step(dir: &Path, s: usize, names: &[&str]) {
        let t: IndexMap<String, HostTensor> =
            names.iter().map(|n| (n.to_string(), tensor(1.0))).collect();
        meshparity_engine::checkpoint::save(&dir.join(format!("step{s}.safetensors")), &t).unwrap();
    }

    #[test]
    fn sites_keep_the_programs_order() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        std::fs::write(from.path().join("sites.txt"), "b.out\na.out\ngrad.w\n").unwrap();
        step(from.path(), 0, &["a.out", "b.out", "grad.w"]);
        step(from.path(), 1, &["a.out", "b.out"]);
        assert_eq!(convert(from.path(), to.path()).unwrap(), 5);
        let index: TraceIndex = serde_json::from_slice(
            &std::fs::read(to.path().join(meshparity_engine::files::TRACE_INDEX)).unwrap(),
        )
        .unwrap();
        let keys: Vec<&str> = index.entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            ["s0.b.out", "s0.a.out", "s0.grad.w", "s1.b.out", "s1.a.out"]
        );
    }

    #[test]
    fn unlisted_and_missing_files_are_errors_that_say_what_to_do() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        let e = convert(from.path(), to.path()).unwrap_err().to_string();
        assert!(e.contains("sites.txt") && e.contains("one per line"), "{e}");
        std::fs::write(from.path().join("sites.txt"), "a.out\n").unwrap();
        let e = convert(from.path(), to.path()).unwrap_err().to_string();
        assert!(e.contains("step0.safetensors"), "{e}");
        step(from.path(), 0, &["a.out", "c.out"]);
        let e = convert(from.path(), to.path()).unwrap_err().to_string();
        assert!(e.contains("`c.out` is not in sites.txt"), "{e}");
        // A FIFO in place of the site list is refused at once, not waited on.
        let fifo = tempfile::tempdir().unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(fifo.path().join("sites.txt"))
            .status()
            .is_ok_and(|s| s.success());
        if made {
            let e = convert(fifo.path(), to.path()).unwrap_err().to_string();
            assert!(e.contains("sites.txt"), "{e}");
        }
    }
}
