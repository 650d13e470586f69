//! Element types of safetensors files.

use serde::Serialize;

/// A safetensors dtype. Floats compare by tolerance; integers and booleans compare exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum TensorDtype {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    BOOL,
}

impl TensorDtype {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "F64" => Self::F64,
            "F32" => Self::F32,
            "F16" => Self::F16,
            "BF16" => Self::BF16,
            "I64" => Self::I64,
            "I32" => Self::I32,
            "I16" => Self::I16,
            "I8" => Self::I8,
            "U64" => Self::U64,
            "U32" => Self::U32,
            "U16" => Self::U16,
            "U8" => Self::U8,
            "BOOL" => Self::BOOL,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::F64 => "F64",
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::I64 => "I64",
            Self::I32 => "I32",
            Self::I16 => "I16",
            Self::I8 => "I8",
            Self::U64 => "U64",
            Self::U32 => "U32",
            Self::U16 => "U16",
            Self::U8 => "U8",
            Self::BOOL => "BOOL",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Self::F64 | Self::I64 | Self::U64 => 8,
            Self::F32 | Self::I32 | Self::U32 => 4,
            Self::F16 | Self::BF16 | Self::I16 | Self::U16 => 2,
            Self::I8 | Self::U8 | Self::BOOL => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Self::F64 | Self::F32 | Self::F16 | Self::BF16)
    }

    /// The spec dtype whose default tolerances apply (floats only).
    pub fn spec_dtype(self) -> Option<meshparity_specs::DType> {
        use meshparity_specs::DType;
        Some(match self {
            Self::F64 => DType::F64,
            Self::F32 => DType::F32,
            Self::F16 => DType::F16,
            Self::BF16 => DType::Bf16,
            _ => return None,
        })
    }
}

impl std::fmt::Display for TensorDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
