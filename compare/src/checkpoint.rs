//! A checkpoint: one safetensors file, or shards named by an index json (`weight_map`), or a
//! directory holding either.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use crate::error::InputError;
use crate::safetensors::{SafetensorsFile, TensorView};

pub struct Checkpoint {
    pub path: PathBuf,
    files: Vec<SafetensorsFile>,
    /// Tensor name → index into `files`, in checkpoint order.
    names: IndexMap<String, usize>,
}

impl Checkpoint {
    pub fn open(path: &Path) -> Result<Self, InputError> {
        let meta = std::fs::metadata(path).map_err(|e| InputError::io(path, e))?;
        if meta.is_dir() {
            return Self::open_dir(path);
        }
        if path.to_string_lossy().ends_with(".json") {
            return Self::open_index(path);
        }
        Ok(Self::of_file(SafetensorsFile::open(path)?))
    }

    /// A checkpoint of one file already open (e.g. held in memory).
    pub fn of_file(file: SafetensorsFile) -> Self {
        let names = file.tensors.keys().map(|n| (n.clone(), 0)).collect();
        Self {
            path: file.path.clone(),
            files: vec![file],
            names,
        }
    }

    fn open_dir(dir: &Path) -> Result<Self, InputError> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| InputError::io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        if let Some(index) = entries
            .iter()
            .find(|p| p.to_string_lossy().ends_with(".safetensors.index.json"))
        {
            return Self::open_index(index);
        }
        let shards: Vec<&PathBuf> = entries
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        if shards.is_empty() {
            return Err(InputError::Other {
                path: dir.to_owned(),
                reason: "directory holds no .safetensors file and no .safetensors.index.json"
                    .into(),
            });
        }
        let mut cp = Self {
            path: dir.to_owned(),
            files: Vec::new(),
            names: IndexMap::new(),
        };
        for shard in shards {
            let name = shard.file_name().map(|n| n.to_string_lossy().into_owned());
            let shard = &meshparity_files::inside(dir, &name.unwrap_or_default(), "the directory")
                .map_err(|e| InputError::io(dir, e))?;
            let file = SafetensorsFile::open(shard)?;
            let idx = cp.files.len();
            for name in file.tensors.keys() {
                if let Some(prev) = cp.names.insert(name.clone(), idx) {
                    return Err(InputError::Other {
                        path: dir.to_owned(),
                        reason: format!(
                            "tensor `{name}` is in both `{}` and `{}`",
                            cp.files[prev].path.display(),
                            shard.display()
                        ),
                    });
                }
            }
            cp.files.push(file);
        }
        Ok(cp)
    }

    fn open_index(index: &Path) -> Result<Self, InputError> {
        let bad = |reason: String| InputError::Index {
            path: index.to_owned(),
            reason,
        };
        let text = meshparity_files::read_to_string(index, meshparity_files::Limit::JSON)
            .map_err(|e| InputError::io(index, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| bad("no `weight_map` object".into()))?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut shard_idx: IndexMap<String, usize> = IndexMap::new();
        let mut files = Vec::new();
        let mut names = IndexMap::new();
        for (name, shard) in map {
            let shard = shard
                .as_str()
                .ok_or_else(|| bad(format!("weight_map entry `{name}` is not a file name")))?;
            let idx = match shard_idx.get(shard) {
                Some(&i) => i,
                None => {
                    let path = meshparity_files::inside(dir, shard, "the index's weight_map")
                        .map_err(|e| bad(e.to_string()))?;
                    files.push(SafetensorsFile::open(&path)?);
                    shard_idx.insert(shard.to_owned(), files.len() - 1);
                    files.len() - 1
                }
            };
            if !files[idx].tensors.contains_key(name) {
                return Err(bad(format!(
                    "weight_map puts `{name}` in `{shard}`, which does not hold it"
                )));
            }
            names.insert(name.clone(), idx);
        }
        for (shard, &i) in &shard_idx {
            if let Some(stray) = files[i].tensors.keys().find(|n| names.get(*n) != Some(&i)) {
                return Err(bad(format!(
                    "shard `{shard}` holds `{stray}`, which weight_map does not list there"
                )));
            }
        }
        Ok(Self {
            path: index.to_owned(),
            files,
            names,
        })
    }

    /// The files the checkpoint is read from.
    pub fn files(&self) -> &[SafetensorsFile] {
        &self.files
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.keys().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    pub fn view(&self, name: &str) -> Option<TensorView<'_>> {
        self.files[*self.names.get(name)?].view(name)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn data_bytes(&self) -> usize {
        self.files.iter().map(SafetensorsFile::data_bytes).sum()
    }
}
