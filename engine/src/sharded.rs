//! A sharded checkpoint: a directory of safetensors files, one per rank, and `index.json`
//! naming each file's slice of each tensor. Any layout writes it; [`read`] assembles the
//! world-size-1 tensors from the index alone, without knowing the mesh that wrote it, so a
//! checkpoint saved on one layout is loaded on any other (and read as one checkpoint).
//!
//! ```json
//! {"format": "meshparity-sharded/1",
//!  "tensors": {"layers.0.attn.wq": {"shape": [32, 64], "dtype": "F32",
//!              "shards": [{"file": "rank-00000.safetensors", "dim": 1, "start": 0, "end": 32},
//!                         {"file": "rank-00001.safetensors", "dim": 1, "start": 32, "end": 64}]},
//!              "optim.step": {"shape": [1], "dtype": "U64",
//!              "shards": [{"file": "rank-00000.safetensors"}]}}}
//! ```
//!
//! A shard without `dim` holds the whole tensor (a replicated one; the first listed is read).
//! A shard may hold rows past `end - start` along `dim` (a padded vocabulary's padding): they
//! are dropped.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use meshparity_compare::safetensors::{SafetensorsFile, TensorView};
use meshparity_compare::{InputError, TensorDtype};
use serde::{Deserialize, Serialize};

use crate::checkpoint;
use crate::tensor::{HostTensor, Shards};

pub const INDEX: &str = "index.json";
pub const FORMAT: &str = "meshparity-sharded/1";

/// A shard's part of one tensor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    pub file: String,
    /// The split dimension and the range of it this shard holds; `None`: the whole tensor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dim: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<usize>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    /// The world-size-1 shape.
    pub shape: Vec<usize>,
    /// As safetensors names it (`F32`, `U64`).
    pub dtype: String,
    pub shards: Vec<Piece>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Index {
    pub format: String,
    pub tensors: IndexMap<String, Entry>,
}

/// Where a rank's tensor sits in the world-size-1 tensor: the whole of it, or `range` of
/// dimension `dim`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slice {
    Whole,
    Split {
        dim: usize,
        range: std::ops::Range<usize>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ShardedError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{path}: not a sharded checkpoint index: {why}")]
    Index { path: String, why: String },
    #[error("`{name}`: {why}")]
    Tensor { name: String, why: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ShardedError + '_ {
    move |source| ShardedError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn dtype_name(d: TensorDtype) -> String {
    serde_json::to_value(d)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The file rank `rank` writes.
pub fn file_of(rank: usize) -> String {
    format!("rank-{rank:05}.safetensors")
}

/// Write every rank's tensors into `dir` with the index; `slice(rank, name)` says where each
/// sits in the world-size-1 tensor of shape `shape(name)`.
pub fn write(
    dir: &Path,
    ranks: &[Shards],
    slice: impl Fn(usize, &str) -> Slice,
    shape: impl Fn(&str, &HostTensor) -> Vec<usize>,
) -> Result<(), ShardedError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut tensors: IndexMap<String, Entry> = IndexMap::new();
    for (rank, shards) in ranks.iter().enumerate() {
        let file = file_of(rank);
        let path = dir.join(&file);
        checkpoint::save(&path, shards).map_err(io(&path))?;
        for (name, t) in shards {
            let piece = match slice(rank, name) {
                Slice::Whole => Piece {
                    file: file.clone(),
                    dim: None,
                    start: None,
                    end: None,
                },
                Slice::Split { dim, range } => Piece {
                    file: file.clone(),
                    dim: Some(dim),
                    start: Some(range.start),
                    end: Some(range.end),
                },
            };
            tensors
                .entry(name.clone())
                .or_insert_with(|| Entry {
                    shape: shape(name, t),
                    dtype: dtype_name(t.dtype),
                    shards: Vec::new(),
                })
                .shards
                .push(piece);
        }
    }
    let index = Index {
        format: FORMAT.to_owned(),
        tensors,
    };
    let path = dir.join(INDEX);
    let json = serde_json::to_vec_pretty(&index).expect("indexes serialize");
    std::fs::write(&path, json).map_err(io(&path))
}

/// The world-size-1 tensors of the checkpoint in `dir`, in index order. Each split tensor must
/// be covered once, from 0 to its length, by its shards.
///
/// Shard files are mapped, not loaded, and a piece's bytes are copied only when it is the one
/// kept: a dp·N checkpoint's replicas (and an index listing one shard 2,500 times, 2.5 GB of
/// clones from a 1 MiB file) cost the world-size-1 tensors, not N copies of them.
pub fn read(dir: &Path) -> Result<Shards, ShardedError> {
    let path = dir.join(INDEX);
    let limit = meshparity_files::Limit {
        bytes: 64 << 20,
        what: "a sharded checkpoint's index",
    };
    let text = meshparity_files::read_to_string(&path, limit).map_err(io(&path))?;
    let index: Index = serde_json::from_str(&text).map_err(|e| ShardedError::Index {
        path: path.display().to_string(),
        why: e.to_string(),
    })?;
    if index.format != FORMAT {
        return Err(ShardedError::Index {
            path: path.display().to_string(),
            why: format!("format `{}`, expected `{FORMAT}`", index.format),
        });
    }
    let mut files: IndexMap<&str, SafetensorsFile> = IndexMap::new();
    for (name, entry) in &index.tensors {
        for p in &entry.shards {
            if !files.contains_key(p.file.as_str()) {
                let file = shard_path(dir, &p.file).map_err(|why| ShardedError::Tensor {
                    name: name.clone(),
                    why,
                })?;
                files.insert(&p.file, SafetensorsFile::open(&file)?);
            }
        }
    }
    let mut out = Shards::new();
    for (name, entry) in &index.tensors {
        let err = |why: String| ShardedError::Tensor {
            name: name.clone(),
            why,
        };
        let mut pieces: Vec<(usize, usize, usize, TensorView<'_>)> = Vec::new();
        let mut whole = None;
        for p in &entry.shards {
            let t = files[p.file.as_str()]
                .view(name)
                .ok_or_else(|| err(format!("{} does not hold it", p.file)))?;
            match (p.dim, p.start, p.end) {
                (None, None, None) => {
                    whole.get_or_insert(t);
                }
                (Some(dim), Some(start), Some(end)) if dim < t.shape.len() && start < end => {
                    pieces.push((dim, start, end, t))
                }
                _ => {
                    return Err(err(format!(
                        "{}: a slice needs `dim`, `start` < `end`",
                        p.file
                    )))
                }
            }
        }
        let t = match whole {
            Some(t) => owned(t),
            None => assemble(entry, pieces).map_err(err)?,
        };
        if t.shape != entry.shape || dtype_name(t.dtype) != entry.dtype {
            return Err(err(format!(
                "assembled {:?} {:?}, the index says {:?} {:?}",
                t.dtype, t.shape, entry.dtype, entry.shape
            )));
        }
        out.insert(name.clone(), t);
    }
    Ok(out)
}

/// A mapped tensor's bytes, copied.
fn owned(v: TensorView<'_>) -> HostTensor {
    HostTensor {
        dtype: v.dtype,
        shape: v.shape.to_vec(),
        bytes: v.bytes.to_vec(),
    }
}

/// A shard file's path: a regular file of the checkpoint's own directory, by the rule every
/// named file follows ([`meshparity_files::inside`]), and in it directly (a rank's file).
fn shard_path(dir: &Path, file: &str) -> Result<PathBuf, String> {
    if file.contains('/') {
        return Err(format!(
            "shard file `{file}` is not a file of the checkpoint's directory"
        ));
    }
    meshparity_files::inside(dir, file, "the index").map_err(|e| e.to_string())
}

/// The pieces of a split tensor, in order along their dimension, each cut to its range.
fn assemble(
    entry: &Entry,
    mut pieces: Vec<(usize, usize, usize, TensorView<'_>)>,
) -> Result<HostTensor, String> {
    pieces.sort_by_key(|p| p.1);
    let Some(&(dim, ..)) = pieces.first() else {
        return Err("no shard holds it".to_owned());
    };
    let mut next = 0;
    let mut parts = Vec::new();
    for (d, start, end, t) in pieces {
        if d != dim {
            return Err(format!("shards split it along dimensions {dim} and {d}"));
        }
        // Blocks join only when they agree with the whole tensor off the split dimension.
        let fits = t.shape.len() == entry.shape.len()
            && t.shape
                .iter()
                .zip(&entry.shape)
                .enumerate()
                .all(|(i, (a, b))| i == dim || a == b)
            && dtype_name(t.dtype) == entry.dtype;
        if !fits {
            return Err(format!(
                "a shard is {} {:?}, which is no block of {} {:?} along dimension {dim}",
                dtype_name(t.dtype),
                t.shape,
                entry.dtype,
                entry.shape
            ));
        }
        // Replicas of one block (dp copies) are listed once each: keep the first.
        if start < next {
            if end <= next {
                continue;
            }
            return Err(format!(
                "shards overlap at {start}..{next} of dimension {dim}"
            ));
        }
        if start > next {
            return Err(format!("nothing holds {next}..{start} of dimension {dim}"));
        }
        if t.shape[dim] < end - start {
            return Err(format!(
                "a shard holds {} of dimension {dim}, its slice {start}..{end}",
                t.shape[dim]
            ));
        }
        parts.push(owned(t).truncate(dim, end - start));
        next = end;
    }
    if next != entry.shape.get(dim).copied().unwrap_or(0) {
        return Err(format!(
            "shards cover 0..{next} of dimension {dim}, of {}",
            entry.shape.get(dim).copied().unwrap_or(0)
        ));
    }
    Ok(HostTensor::concat(&parts, dim))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rows: usize, cols: usize, first: f32) -> HostTensor {
        let bytes = (0..rows * cols)
            .flat_map(|i| (first + i as f32).to_le_bytes())
            .collect();
        HostTensor {
            dtype: TensorDtype::F32,
            shape: vec![rows, cols],
            bytes,
        }
    }

    /// Two TP ranks' column blocks (the second padded by a column) and two dp replicas of
    /// them, read back whole without the mesh; a gap is an error naming the tensor.
    #[test]
    fn shards_assemble_from_the_index_alone() {
        let dir = tempfile::tempdir().unwrap();
        let full = t(2, 3, 0.0);
        let halves = full.pad(1, 4).split(1, 2);
        let ranks: Vec<Shards> = (0..4)
            .map(|r| {
                [("w".to_owned(), halves[r % 2].clone())]
                    .into_iter()
                    .collect()
            })
            .collect();
        let slice = |r: usize, _: &str| Slice::Split {
            dim: 1,
            range: if r.is_multiple_of(2) { 0..2 } else { 2..3 },
        };
        write(dir.path(), &ranks, slice, |_, _| vec![2, 3]).unwrap();
        let back = read(dir.path()).unwrap();
        assert_eq!(back["w"], full);
        // Only the first block written: the rest of the tensor is held by nothing.
        let gap = tempfile::tempdir().unwrap();
        write(gap.path(), &ranks[..1], slice, |_, _| vec![2, 3]).unwrap();
        let e = read(gap.path()).unwrap_err().to_string();
        assert!(
            e.contains("`w`") && e.contains("0..2 of dimension 1, of 3"),
            "{e}"
        );
    }

    /// An index that names a block of another shape (or dtype) than its tensor's is an error
    /// naming the tensor, not a panic while joining the blocks.
    #[test]
    fn a_block_that_does_not_fit_its_tensor_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let ranks: Vec<Shards> = [t(2, 2, 0.0), t(3, 1, 4.0)]
            .into_iter()
            .map(|b| [("w".to_owned(), b)].into_iter().collect())
            .collect();
        let slice = |r: usize, _: &str| Slice::Split {
            dim: 1,
            range: if r == 0 { 0..2 } else { 2..3 },
        };
        write(dir.path(), &ranks, slice, |_, _| vec![2, 3]).unwrap();
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("`w`") && e.contains("no block of"), "{e}");
    }

    #[test]
    fn a_shard_file_outside_the_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rank-00000.safetensors"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("rank-00001.safetensors"))
            .unwrap();
        assert!(shard_path(dir.path(), "../y.safetensors").is_err());
        assert!(shard_path(dir.path(), "/etc/passwd").is_err());
        assert!(shard_path(dir.path(), "rank-00001.safetensors").is_err());
        assert!(shard_path(dir.path(), "rank-00000.safetensors").is_ok());
    }
}
