//! Tensors on the host as bytes: what artifacts, checkpoints, shards and comparisons exchange.
//! Sharding works on bytes so that a round trip is exact by construction, whatever the dtype.

use indexmap::IndexMap;
use meshparity_compare::TensorDtype;

/// Named tensors: a checkpoint, one rank's shards, an artifact file.
pub type Shards = IndexMap<String, HostTensor>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTensor {
    pub dtype: TensorDtype,
    pub shape: Vec<usize>,
    /// Row-major, little-endian.
    pub bytes: Vec<u8>,
}

impl HostTensor {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` equal parts along `dim`.
    pub fn split(&self, dim: usize, n: usize) -> Vec<HostTensor> {
        let size = self.dtype.size();
        let outer: usize = self.shape[..dim].iter().product();
        let inner: usize = self.shape[dim + 1..].iter().product::<usize>() * size;
        let part = self.shape[dim] / n;
        (0..n)
            .map(|i| {
                let mut bytes = Vec::with_capacity(self.bytes.len() / n);
                for o in 0..outer {
                    let row = o * self.shape[dim] * inner;
                    bytes.extend_from_slice(
                        &self.bytes[row + i * part * inner..row + (i + 1) * part * inner],
                    );
                }
                let mut shape = self.shape.clone();
                shape[dim] = part;
                HostTensor {
                    dtype: self.dtype,
                    shape,
                    bytes,
                }
            })
            .collect()
    }

    /// Zeros appended along `dim` up to `len` (a vocabulary padded to a multiple of tp, as
    /// Megatron pads it): the bytes of zero are zero in every float dtype.
    pub fn pad(&self, dim: usize, len: usize) -> HostTensor {
        let have = self.shape[dim];
        if len <= have {
            return self.clone();
        }
        let size = self.dtype.size();
        let outer: usize = self.shape[..dim].iter().product();
        let inner: usize = self.shape[dim + 1..].iter().product::<usize>() * size;
        let mut bytes = Vec::with_capacity(outer * len * inner);
        for o in 0..outer {
            bytes.extend_from_slice(&self.bytes[o * have * inner..(o + 1) * have * inner]);
            bytes.resize(bytes.len() + (len - have) * inner, 0);
        }
        let mut shape = self.shape.clone();
        shape[dim] = len;
        HostTensor {
            dtype: self.dtype,
            shape,
            bytes,
        }
    }

    /// The first `len` entries along `dim`: the inverse of [`HostTensor::pad`].
    pub fn truncate(&self, dim: usize, len: usize) -> HostTensor {
        let have = self.shape[dim];
        if len >= have {
            return self.clone();
        }
        let size = self.dtype.size();
        let outer: usize = self.shape[..dim].iter().product();
        let inner: usize = self.shape[dim + 1..].iter().product::<usize>() * size;
        let mut bytes = Vec::with_capacity(outer * len * inner);
        for o in 0..outer {
            let row = o * have * inner;
            bytes.extend_from_slice(&self.bytes[row..row + len * inner]);
        }
        let mut shape = self.shape.clone();
        shape[dim] = len;
        HostTensor {
            dtype: self.dtype,
            shape,
            bytes,
        }
    }

    /// The first index along `dim`, at or past `len`, where some element is not zero (a padded
    /// vocabulary's padding that moved), or `None`. Values are compared, not bytes: −0 is zero.
    pub fn nonzero_past(&self, dim: usize, len: usize) -> Option<usize> {
        let have = self.shape[dim];
        if len >= have {
            return None;
        }
        let size = self.dtype.size();
        let outer: usize = self.shape[..dim].iter().product();
        let inner: usize = self.shape[dim + 1..].iter().product();
        let zero = |b: &[u8]| meshparity_compare::agreement::decode(self.dtype, b) == Some(0.0);
        (len..have).find(|&i| {
            (0..outer).any(|o| {
                let at = (o * have + i) * inner * size;
                self.bytes[at..at + inner * size]
                    .chunks_exact(size)
                    .any(|b| !zero(b))
            })
        })
    }

    /// Inverse of [`HostTensor::split`].
    pub fn concat(parts: &[HostTensor], dim: usize) -> HostTensor {
        let first = &parts[0];
        let size = first.dtype.size();
        let outer: usize = first.shape[..dim].iter().product();
        let inner: usize = first.shape[dim + 1..].iter().product::<usize>() * size;
        let mut bytes = Vec::with_capacity(first.bytes.len() * parts.len());
        for o in 0..outer {
            for p in parts {
                let chunk = p.shape[dim] * inner;
                bytes.extend_from_slice(&p.bytes[o * chunk..(o + 1) * chunk]);
            }
        }
        let mut shape = first.shape.clone();
        shape[dim] = parts.iter().map(|p| p.shape[dim]).sum();
        HostTensor {
            dtype: first.dtype,
            shape,
            bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_concat_are_inverse_along_every_dim() {
        let t = HostTensor {
            dtype: TensorDtype::U8,
            shape: vec![2, 4, 6],
            bytes: (0..48).collect(),
        };
        for dim in 0..3 {
            let parts = t.split(dim, 2);
            assert_eq!(parts[0].shape[dim], t.shape[dim] / 2);
            assert_eq!(HostTensor::concat(&parts, dim), t);
        }
        for dim in 0..3 {
            let padded = t.pad(dim, t.shape[dim] + 3);
            assert_eq!(padded.shape[dim], t.shape[dim] + 3);
            assert_eq!(
                padded.bytes.iter().filter(|&&b| b == 0).count(),
                1 + 3 * 48 / t.shape[dim]
            );
            assert_eq!(padded.truncate(dim, t.shape[dim]), t);
            assert_eq!(padded.nonzero_past(dim, t.shape[dim]), None);
            assert_eq!(padded.nonzero_past(dim, 0), Some(0));
        }
        let cols = t.split(2, 3);
        assert_eq!(
            cols[1].bytes[..4],
            [2, 3, 8, 9],
            "column block 1 of the first rows"
        );
    }
}
