//! Checkpoints and per-rank shard files as safetensors, through the comparison crate's
//! reader and writer (one implementation of the format in the project).

use std::path::Path;

use indexmap::IndexMap;
pub use meshparity_compare::safetensors::sync_to_disk;
use meshparity_compare::safetensors::{write, TensorData};
use meshparity_compare::{Checkpoint, InputError};

use crate::tensor::HostTensor;

pub fn save(path: &Path, tensors: &IndexMap<String, HostTensor>) -> std::io::Result<()> {
    write(path, &data(tensors), METADATA)
}

/// The bytes [`save`] would write.
pub fn encode(tensors: &IndexMap<String, HostTensor>) -> std::io::Result<Vec<u8>> {
    meshparity_compare::safetensors::encode(&data(tensors), METADATA)
}

const METADATA: &[(&str, &str)] = &[("format", "meshparity")];

fn data(tensors: &IndexMap<String, HostTensor>) -> Vec<TensorData<'_>> {
    tensors
        .iter()
        .map(|(name, t)| TensorData {
            name,
            dtype: t.dtype,
            shape: &t.shape,
            bytes: &t.bytes,
        })
        .collect()
}

pub fn load(path: &Path) -> Result<IndexMap<String, HostTensor>, InputError> {
    let cp = Checkpoint::open(path)?;
    Ok(cp
        .names()
        .map(|name| {
            let v = cp.view(name).expect("listed names have views");
            (
                name.to_owned(),
                HostTensor {
                    dtype: v.dtype,
                    shape: v.shape.to_vec(),
                    bytes: v.bytes.to_vec(),
                },
            )
        })
        .collect())
}
