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
/// 14.8 s). A runner's worker turns it off and flushes its filesystems once before it records
/// its result (`meshparity_files::flush_filesystems`). Returns the previous setting, for the
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
}
