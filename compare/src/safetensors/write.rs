//! Writing safetensors files (checkpoints of the reference backend, test fixtures).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::dtype::TensorDtype;

/// Whether [`write`] flushes each file to disk before renaming it into place.
static SYNC: AtomicBool = AtomicBool::new(true);

/// Whether [`write`] flushes each file to disk (`fsync`) before renaming it into place, for this
/// whole process; on by default, since a run's artifacts are its evidence and must survive a
/// machine crash beside the result that cites them. Either way a reader never sees a torn file
/// (the rename), and a killed process loses nothing (the page cache outlives it). A calibration
/// sweep turns it off while it runs: its scratch files are judged and deleted within a second,
/// and flushing them was a third of the sweep's wall time (quickstart, 2 seeds: 21.2 s →
/// 14.8 s). A runner's worker turns it off and flushes its own files once before it records
/// its result (`meshparity_files::flush_trees`). Returns the previous setting, for the
/// caller to put back.
pub fn sync_to_disk(on: bool) -> bool {
    SYNC.swap(on, Ordering::Relaxed)
}

/// One tensor to write.
pub struct TensorData<'a> {
    pub name: &'a str,
    pub dtype: TensorDtype,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

/// The whole file [`write`] would write, in memory: for a comparison that writes its inputs
/// only when someone will need them ([`crate::SafetensorsFile::from_bytes`] reads it back).
pub fn encode(tensors: &[TensorData<'_>], metadata: &[(&str, &str)]) -> std::io::Result<Vec<u8>> {
    let text = header(tensors, metadata)?;
    let data: usize = tensors.iter().map(|t| t.bytes.len()).sum();
    let mut out = Vec::with_capacity(8 + text.len() + data);
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    for t in tensors {
        out.extend_from_slice(t.bytes);
    }
    Ok(out)
}

/// The JSON header, padded so the data section starts 8-byte aligned.
fn header(tensors: &[TensorData<'_>], metadata: &[(&str, &str)]) -> std::io::Result<String> {
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
    Ok(text)
}

/// Write tensors in the given order, atomically (temp file + rename), header padded to 8 bytes
/// like the reference implementation so the data section is aligned.
pub fn write(
    path: &Path,
    tensors: &[TensorData<'_>],
    metadata: &[(&str, &str)],
) -> std::io::Result<()> {
    let text = header(tensors, metadata)?;
    let tmp = path.with_extension("safetensors.tmp");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        f.write_all(&(text.len() as u64).to_le_bytes())?;
        f.write_all(text.as_bytes())?;
        for t in tensors {
            f.write_all(t.bytes)?;
        }
        let f = f.into_inner().map_err(|e| e.into_error())?;
        if SYNC.load(Ordering::Relaxed) {
            f.sync_all()?;
        }
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the flush a file is the same bytes: only when it reaches the disk differs.
    #[test]
    fn a_write_without_the_flush_is_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..24u8).collect();
        let t = [TensorData {
            name: "w",
            dtype: TensorDtype::F32,
            shape: &[2, 3],
            bytes: &bytes,
        }];
        let (synced, unsynced) = (dir.path().join("a"), dir.path().join("b"));
        write(&synced, &t, &[]).unwrap();
        let before = sync_to_disk(false);
        write(&unsynced, &t, &[]).unwrap();
        sync_to_disk(before);
        assert_eq!(
            std::fs::read(&synced).unwrap(),
            std::fs::read(&unsynced).unwrap()
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    /// What `encode` holds in memory is the file `write` writes, and reads back the same.
    #[test]
    fn encoded_bytes_are_the_written_file() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b): (Vec<u8>, Vec<u8>) = ((0..24u8).collect(), (0..16u8).collect());
        let t = [
            TensorData {
                name: "w",
                dtype: TensorDtype::F32,
                shape: &[2, 3],
                bytes: &a,
            },
            TensorData {
                name: "u",
                dtype: TensorDtype::F64,
                shape: &[2],
                bytes: &b,
            },
        ];
        let path = dir.path().join("w.safetensors");
        write(&path, &t, &[("format", "x")]).unwrap();
        let bytes = encode(&t, &[("format", "x")]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        let f = crate::safetensors::SafetensorsFile::from_bytes(&path, bytes).unwrap();
        assert_eq!(f.view("u").unwrap().bytes, &b[..]);
        assert_eq!(f.metadata["format"], "x");
    }
}
