//! Writing safetensors files (checkpoints of the reference backend, test fixtures).

use std::io::Write;
use std::path::Path;

use crate::dtype::TensorDtype;

/// One tensor to write.
pub struct TensorData<'a> {
    pub name: &'a str,
    pub dtype: TensorDtype,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

/// Write tensors in the given order, atomically (temp file + rename), header padded to 8 bytes
/// like the reference implementation so the data section is aligned.
pub fn write(
    path: &Path,
    tensors: &[TensorData<'_>],
    metadata: &[(&str, &str)],
) -> std::io::Result<()> {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let meta = metadata
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
            .collect();
        header.insert("__metadata__".into(), serde_json::Value::Object(meta));
    }
    let mut offset = 0usize;
    for t in tensors {
        let numel: usize = t.shape.iter().product();
        if numel * t.dtype.size() != t.bytes.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "tensor `{}`: shape {:?} of {} does not match {} bytes",
                    t.name,
                    t.shape,
                    t.dtype,
                    t.bytes.len()
                ),
            ));
        }
        header.insert(
            t.name.to_owned(),
            serde_json::json!({
                "dtype": t.dtype.as_str(),
                "shape": t.shape,
                "data_offsets": [offset, offset + t.bytes.len()],
            }),
        );
        offset += t.bytes.len();
    }
    let mut text = serde_json::to_string(&header).expect("headers serialize");
    while !(8 + text.len()).is_multiple_of(8) {
        text.push(' ');
    }
    let tmp = path.with_extension("safetensors.tmp");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        f.write_all(&(text.len() as u64).to_le_bytes())?;
        f.write_all(text.as_bytes())?;
        for t in tensors {
            f.write_all(t.bytes)?;
        }
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}
