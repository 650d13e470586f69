//! Host tensors (see [`meshparity_engine::HostTensor`]) to and from burn tensors.

use burn::tensor::{DType, Device, Tensor, TensorData};
use meshparity_compare::TensorDtype;

pub use meshparity_engine::HostTensor;

/// The safetensors dtype of a burn float dtype.
pub fn tensor_dtype(d: DType) -> TensorDtype {
    match d {
        DType::F64 => TensorDtype::F64,
        DType::F16 => TensorDtype::F16,
        DType::BF16 => TensorDtype::BF16,
        _ => TensorDtype::F32,
    }
}

pub fn burn_dtype(d: TensorDtype) -> DType {
    match d {
        TensorDtype::F64 => DType::F64,
        TensorDtype::F16 => DType::F16,
        TensorDtype::BF16 => DType::BF16,
        _ => DType::F32,
    }
}

/// Host tensors to and from burn parameter tensors.
pub trait Param: Sized {
    /// From a parameter tensor, with its logical shape (a `[1, n]` vector becomes `[n]`).
    fn from_param(t: &Tensor<2>, shape: &[usize]) -> Self;
    /// Back to a parameter tensor (`[n]` becomes `[1, n]`).
    fn to_param(&self, device: &Device) -> Tensor<2>;
}

impl Param for HostTensor {
    fn from_param(t: &Tensor<2>, shape: &[usize]) -> Self {
        let data = t.to_data();
        Self {
            dtype: tensor_dtype(data.dtype()),
            shape: shape.to_vec(),
            bytes: data.as_bytes().to_vec(),
        }
    }

    fn to_param(&self, device: &Device) -> Tensor<2> {
        let shape2 = if self.shape.len() == 1 {
            [1, self.shape[0]]
        } else {
            [self.shape[0], self.shape[1]]
        };
        let dtype = burn_dtype(self.dtype);
        Tensor::<2>::from_data(
            TensorData::from_bytes_vec(self.bytes.clone(), shape2, dtype),
            (device, dtype),
        )
    }
}

/// Token counts' dtype: f64 where the device has it, else f32 (exact below 2^24).
pub fn count_dtype(device: &Device) -> DType {
    if device.supports_dtype(DType::F64) {
        DType::F64
    } else {
        DType::F32
    }
}
