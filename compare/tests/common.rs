//! Fixture helpers shared by the integration tests: checkpoints written in code.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use meshparity_compare::safetensors::{write, TensorData};
use meshparity_compare::TensorDtype;

/// A tensor to write: name, dtype, shape, little-endian bytes.
pub struct T(
    pub &'static str,
    pub TensorDtype,
    pub Vec<usize>,
    pub Vec<u8>,
);

pub fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn i64s(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn bf16s(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
        .collect()
}

pub fn f16s(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect()
}

pub fn save(dir: &Path, file: &str, tensors: &[T]) -> PathBuf {
    let path = dir.join(file);
    let data: Vec<TensorData<'_>> = tensors
        .iter()
        .map(|t| TensorData {
            name: t.0,
            dtype: t.1,
            shape: &t.2,
            bytes: &t.3,
        })
        .collect();
    write(&path, &data, &[("format", "pt")]).unwrap();
    path
}

/// Deterministic pseudo-random values in [-1, 1).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n).map(|_| rng.f32() * 2.0 - 1.0).collect()
}
