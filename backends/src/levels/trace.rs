//! A traced run's artifact: the per-site values ([`crate::parallel::trace`]) as
//! `trace.safetensors` and their order as `trace.json`, for `meshparity_judge::locate`.

use std::path::Path;

use indexmap::IndexMap;
use meshparity_compare::TensorDtype;
use meshparity_engine::trace::{write_trace, TraceEntry, TraceIndex};
use meshparity_engine::{HostTensor, TraceError};

use crate::parallel::trace::Entry;

/// Write `entries` of a run with `microbatches` per replica into `dir`.
pub fn write(dir: &Path, microbatches: usize, entries: Vec<Entry>) -> Result<(), TraceError> {
    std::fs::create_dir_all(dir).map_err(|source| TraceError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let mut index = TraceIndex {
        microbatches,
        entries: Vec::with_capacity(entries.len()),
        program: false,
        left_out: Vec::new(),
    };
    let mut tensors = IndexMap::with_capacity(entries.len());
    for e in entries {
        let bytes = e.value.data.iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = HostTensor {
            dtype: TensorDtype::F64,
            shape: e.value.shape,
            bytes,
        };
        tensors.insert(e.key.clone(), t);
        index.entries.push(TraceEntry {
            key: e.key,
            like: e.like,
            blocks: e.blocks,
            over: Vec::new(),
        });
    }
    write_trace(dir, &index, &tensors)
}
