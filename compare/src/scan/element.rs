//! How each dtype's elements are read.

use half::{bf16, f16};

/// How one dtype's elements are read: value as f64, raw bits, and the bits mapped to a
/// monotonic integer line (for ULP distance).
pub(super) trait Element {
    const SIZE: usize;
    /// Layout the fused AVX2 kernel reads straight from bytes (f32, f64); `None` otherwise.
    const FUSED: Option<Fused> = None;
    fn load(b: &[u8]) -> (f64, u64);
    fn ordinal(bits: u64) -> i128;
}

/// IEEE floats: flip negative numbers so that integer order follows float order.
fn float_ordinal(bits: u64, width: u32) -> i128 {
    let sign = 1u64 << (width - 1);
    if bits & sign != 0 {
        -((bits & (sign - 1)) as i128)
    } else {
        bits as i128
    }
}

macro_rules! float_elem {
    ($name:ident, $size:expr, $width:expr, $fused:expr, $load:expr) => {
        pub(super) struct $name;
        impl Element for $name {
            const SIZE: usize = $size;
            const FUSED: Option<Fused> = $fused;
            #[inline(always)]
            fn load(b: &[u8]) -> (f64, u64) {
                $load(b)
            }
            #[inline(always)]
            fn ordinal(bits: u64) -> i128 {
                float_ordinal(bits, $width)
            }
        }
    };
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Fused {
    F32,
    F64,
}

float_elem!(F64, 8, 64, Some(Fused::F64), |b: &[u8]| {
    let bits = u64::from_le_bytes(b[..8].try_into().unwrap());
    (f64::from_bits(bits), bits)
});
float_elem!(F32, 4, 32, Some(Fused::F32), |b: &[u8]| {
    let bits = u32::from_le_bytes(b[..4].try_into().unwrap());
    (f32::from_bits(bits) as f64, bits as u64)
});
float_elem!(F16, 2, 16, None, |b: &[u8]| {
    let bits = u16::from_le_bytes(b[..2].try_into().unwrap());
    (f16::from_bits(bits).to_f64(), bits as u64)
});
float_elem!(BF16, 2, 16, None, |b: &[u8]| {
    let bits = u16::from_le_bytes(b[..2].try_into().unwrap());
    (bf16::from_bits(bits).to_f64(), bits as u64)
});

macro_rules! int_elem {
    ($name:ident, $ty:ty, $size:expr) => {
        pub(super) struct $name;
        impl Element for $name {
            const SIZE: usize = $size;
            #[inline(always)]
            fn load(b: &[u8]) -> (f64, u64) {
                let v = <$ty>::from_le_bytes(b[..$size].try_into().unwrap());
                (v as f64, v as u64)
            }
            #[inline(always)]
            fn ordinal(bits: u64) -> i128 {
                (bits as $ty) as i128
            }
        }
    };
}

int_elem!(I64, i64, 8);
int_elem!(I32, i32, 4);
int_elem!(I16, i16, 2);
int_elem!(I8, i8, 1);
int_elem!(U64, u64, 8);
int_elem!(U32, u32, 4);
int_elem!(U16, u16, 2);
int_elem!(U8, u8, 1);
