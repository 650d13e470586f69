//! A sharded mesh's checkpoint in its own layout (ZeRO-3 / FSDP: what each rank holds is its
//! flat shards, and that is what it saves, as torch's DCP does), and the reader that merges the
//! shards back into each rank's whole tensors.

use indexmap::IndexMap;

use super::{is_buffer, Sharded};
use crate::host::HostTensor;

/// Per-rank host tensors by name.
pub type HostRanks = Vec<IndexMap<String, HostTensor>>;

/// Bytes per element of `t`.
fn element(t: &HostTensor) -> usize {
    let numel: usize = t.shape.iter().product();
    t.bytes.len() / numel.max(1)
}

impl Sharded<'_> {
    /// Each rank's whole tensors cut to its flat shards (`[width]`, the last padded with
    /// zeros); buffers whole.
    pub fn flatten_checkpoint(&self, ranks: &HostRanks) -> HostRanks {
        ranks
            .iter()
            .enumerate()
            .map(|(rank, held)| {
                held.iter()
                    .map(|(name, t)| {
                        if is_buffer(name) {
                            return (name.clone(), t.clone());
                        }
                        let g = self.group(rank, name);
                        let numel: usize = t.shape.iter().product();
                        let w = super::flat::width(numel, g.ranks.len());
                        let es = element(t);
                        let start = (g.index * w).min(numel) * es;
                        let end = ((g.index + 1) * w).min(numel) * es;
                        let mut bytes = t.bytes[start..end].to_vec();
                        bytes.resize(w * es, 0);
                        let shard = HostTensor {
                            dtype: t.dtype,
                            shape: vec![w],
                            bytes,
                        };
                        (name.clone(), shard)
                    })
                    .collect()
            })
            .collect()
    }

    /// Every rank's whole tensors from every rank's flat shards, with the shapes `like` holds
    /// (what the plan gives each rank). A rank missing a shard lacks the tensor: the merge
    /// after says which.
    pub fn merge_checkpoint(&self, flat: &HostRanks, like: &HostRanks) -> HostRanks {
        like.iter()
            .enumerate()
            .map(|(rank, held)| {
                held.iter()
                    .filter_map(|(name, t)| {
                        if is_buffer(name) {
                            return Some((name.clone(), flat[rank].get(name)?.clone()));
                        }
                        let g = self.group(rank, name);
                        let numel: usize = t.shape.iter().product();
                        let mut bytes = Vec::with_capacity(t.bytes.len());
                        for &r in &g.ranks {
                            bytes.extend_from_slice(&flat[r].get(name)?.bytes);
                        }
                        bytes.truncate(numel * element(t));
                        let whole = HostTensor {
                            dtype: t.dtype,
                            shape: t.shape.clone(),
                            bytes,
                        };
                        Some((name.clone(), whole))
                    })
                    .collect()
            })
            .collect()
    }
}
