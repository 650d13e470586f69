//! A parameter's flat shards: its elements in row-major order cut into equal runs, the last
//! padded with zeros (Megatron's distributed optimizer pads its buffers, FSDP2 pads dim 0, so
//! every rank's shard has one size). Padding stays zero: its gradient is zero, so every
//! optimizer leaves it at zero and it adds nothing to a norm.

use burn::tensor::Tensor;

/// Elements per shard of a tensor of `numel` elements over `k` ranks.
pub fn width(numel: usize, k: usize) -> usize {
    numel.div_ceil(k)
}

/// `t` as one padded row [1, k·width]: shard i is block i of it.
pub fn padded(t: &Tensor<2>, k: usize) -> Tensor<2> {
    let numel = t.dims()[0] * t.dims()[1];
    let row = t.clone().reshape([1, numel]);
    let pad = width(numel, k) * k - numel;
    if pad == 0 {
        return row;
    }
    let zeros = Tensor::<2>::zeros([1, pad], (&t.device(), t.dtype()));
    Tensor::cat(vec![row, zeros], 1)
}

/// Shard `i` of `k` of `t`: [1, width].
pub fn chunk(t: &Tensor<2>, k: usize, i: usize) -> Tensor<2> {
    let numel = t.dims()[0] * t.dims()[1];
    let w = width(numel, k);
    padded(t, k).narrow(1, i * w, w)
}

/// The padded row of every shard back to the tensor of shape `dims`.
pub fn unflat(row: Tensor<2>, dims: [usize; 2]) -> Tensor<2> {
    row.narrow(1, 0, dims[0] * dims[1]).reshape(dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{DType, TensorData};

    #[test]
    fn shards_pad_the_last_and_put_back_exactly() {
        let device = burn::tensor::Device::flex();
        let data: Vec<f64> = (0..10).map(f64::from).collect();
        let t = Tensor::<2>::from_data(TensorData::new(data, [2, 5]), (&device, DType::F64));
        assert_eq!(width(10, 4), 3);
        let parts: Vec<_> = (0..4).map(|i| chunk(&t, 4, i)).collect();
        assert_eq!(parts[3].dims(), [1, 3]);
        let last = parts[3].clone().into_data().try_to_vec::<f64>().unwrap();
        assert_eq!(last, vec![9.0, 0.0, 0.0]);
        let back = unflat(Tensor::cat(parts, 1), [2, 5]);
        assert_eq!(back.into_data(), t.into_data());
    }
}
