//! Weight updates, `weights after k steps − seed weights`, in f64: what the optimizer did.
//!
//! The oracle level compares updates rather than weights. Measured against the weights
//! themselves, a wrong update is diluted by the initialization (after 2 AdamW steps at lr 1e-3
//! the weights of a tiny llama moved by ~10% of their norm, with SGD by ~0.01%), so a gate loose
//! enough for round-off in the weights would wave through a gradient bug that only shows in the
//! step. Relative to the update, the same bug is the same size at any lr and optimizer.
//! The difference of two stored values is exact in f64 for every dtype the engine writes; the
//! seed may be bf16 where the weights after training are the optimizer's f32 master weights.

use meshparity_compare::agreement::decode;
use meshparity_compare::TensorDtype;

use meshparity_engine::tensor::{HostTensor, Shards};

/// `weights − seed` for every tensor both hold with one shape, as f64.
pub fn updates(seed: &Shards, weights: &Shards) -> Shards {
    weights
        .iter()
        .filter_map(|(name, w)| {
            let s = seed.get(name)?;
            (s.shape == w.shape).then(|| (name.clone(), difference(w, s)))
        })
        .collect()
}

fn difference(a: &HostTensor, b: &HostTensor) -> HostTensor {
    let bytes = a
        .bytes
        .chunks_exact(a.dtype.size())
        .zip(b.bytes.chunks_exact(b.dtype.size()))
        .flat_map(|(x, y)| {
            let d = decode(a.dtype, x).unwrap_or(f64::NAN) - decode(b.dtype, y).unwrap_or(f64::NAN);
            d.to_le_bytes()
        })
        .collect();
    HostTensor {
        dtype: TensorDtype::F64,
        shape: a.shape.clone(),
        bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_are_exact_differences() {
        let t = |v: &[f32]| HostTensor {
            dtype: TensorDtype::F32,
            shape: vec![v.len()],
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let seed: Shards = [("w".to_owned(), t(&[1.0, 0.1]))].into_iter().collect();
        let after: Shards = [("w".to_owned(), t(&[1.5, 0.1 + 1e-7]))]
            .into_iter()
            .collect();
        let u = &updates(&seed, &after)["w"];
        let d: Vec<f64> = u
            .bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(d[0], 0.5);
        assert_eq!(d[1], (0.1f32 + 1e-7) as f64 - 0.1f32 as f64);
    }
}
