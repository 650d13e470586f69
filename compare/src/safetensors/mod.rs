//! The safetensors format: an 8-byte little-endian header length, a JSON header mapping tensor
//! names to dtype, shape and data offsets, then the data.
//!
//! Our own reader (not the `safetensors` crate) so every malformation gets a message that names
//! the tensor and the numbers that disagree, and so files are memory-mapped without copies.

mod read;
mod write;

pub use read::{SafetensorsFile, TensorView};
pub use write::{encode, sync_to_disk, write, TensorData};
