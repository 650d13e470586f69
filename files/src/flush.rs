//! One flush to disk for everything a process wrote, instead of one per file.
//!
//! A worker writes dozens of files (a safetensors file per step and kind, traces, judged
//! comparisons). Flushing each before its rename waits for the disk once per file; the files
//! only have to be on disk before the result that cites them is recorded, so a worker writes
//! them unflushed and flushes its own trees once at the end ([`flush_trees`]).

use std::path::Path;

/// Files opened at once: a program that wrote a hundred thousand files must not run this
/// process out of descriptors (a file that could not be opened would go unflushed).
const BATCH: usize = 256;

/// Flush every file and directory below each of `dirs` (and the directories that hold them)
/// to disk, and nothing else. A flush of their filesystems (`syncfs`) also flushed what other
/// jobs were writing at the time — traces and tries they delete a moment later: the quickstart
/// wrote 579–705 MB to its disk for 50 MB of results (58 MB this way; docs/performance.md).
/// Writeback of a batch of files is started first and waited for after, so the disk sees them
/// together; links are not followed, and a file gone since the walk or no longer a regular one
/// (swapped for a FIFO, whose open would wait for a writer) has nothing to flush. Directories
/// that do not exist are skipped.
pub fn flush_trees(dirs: &[&Path]) -> std::io::Result<()> {
    let (mut files, mut folders) = (Vec::new(), Vec::new());
    for dir in dirs {
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            walk(dir, &mut files, &mut folders)?;
            // The entries that name the tree, up to the job's directory in the run's.
            folders.extend(dir.ancestors().skip(1).take(2).map(Path::to_path_buf));
        }
    }
    for batch in files.chunks(BATCH) {
        let mut opened = Vec::with_capacity(batch.len());
        for path in batch {
            match crate::regular::open(path) {
                Ok(f) => opened.push(f),
                Err(e) if gone(&e) => {}
                Err(e) => return Err(e),
            }
        }
        for f in &opened {
            imp::start_writeback(f);
        }
        for f in &opened {
            f.sync_data()?;
        }
    }
    folders.sort();
    folders.dedup();
    for d in &folders {
        if let Ok(f) = std::fs::File::open(d) {
            f.sync_all()?;
        }
    }
    Ok(())
}

/// Whether an open failed because the path no longer names a regular file.
fn gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidInput
    )
}

/// Every regular file and directory below `dir`, without following links; a stack, not
/// recursion, so a program's deeply nested output cannot overflow this thread's.
fn walk(
    dir: &Path,
    files: &mut Vec<std::path::PathBuf>,
    folders: &mut Vec<std::path::PathBuf>,
) -> std::io::Result<()> {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                todo.push(entry.path());
            } else if kind.is_file() {
                files.push(entry.path());
            }
        }
        folders.push(dir);
    }
    Ok(())
}

#[cfg(target_os = "linux")]
mod imp {
    use std::os::unix::io::AsRawFd;

    /// Ask the kernel to start writing `f` back, without waiting for it.
    pub fn start_writeback(f: &std::fs::File) {
        // SAFETY: `f` is an open descriptor for the call's whole duration; a failure only
        // leaves the writeback to the `fdatasync` that follows.
        unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn start_writeback(_: &std::fs::File) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_trees_and_skips_missing_ones_and_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/c"), b"x").unwrap();
        std::os::unix::fs::symlink("/nonexistent", dir.path().join("a/link")).unwrap();
        let fifo = std::ffi::CString::new(dir.path().join("a/fifo").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        for i in 0..BATCH + 3 {
            std::fs::write(dir.path().join(format!("a/b/f{i}")), b"y").unwrap();
        }
        let missing = dir.path().join("missing");
        flush_trees(&[&dir.path().join("a"), &missing]).unwrap();
    }
}
