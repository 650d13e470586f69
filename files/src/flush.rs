//! One flush to disk for everything a process wrote, instead of one per file.
//!
//! A worker writes dozens of files (a safetensors file per step and kind, traces, judged
//! comparisons). Flushing each before its rename waits for the disk once per file; the files
//! only have to be on disk before the result that cites them is recorded, so a worker writes
//! them unflushed and flushes their filesystems once at the end ([`flush_filesystems`]).

use std::path::Path;

/// Flush every filesystem that holds one of `dirs` to disk (Linux `syncfs`, once per
/// filesystem). Directories that do not exist are skipped. Elsewhere than on Linux, where
/// there is no per-filesystem flush, `sync` flushes them all.
pub fn flush_filesystems(dirs: &[&Path]) -> std::io::Result<()> {
    imp::flush(dirs)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    use std::path::Path;

    pub fn flush(dirs: &[&Path]) -> std::io::Result<()> {
        let mut done = Vec::new();
        for dir in dirs {
            let Ok(meta) = std::fs::metadata(dir) else {
                continue;
            };
            if done.contains(&meta.dev()) {
                continue;
            }
            let f = std::fs::File::open(dir)?;
            // SAFETY: `f` is an open descriptor for the call's whole duration.
            if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            done.push(meta.dev());
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::path::Path;

    pub fn flush(_: &[&Path]) -> std::io::Result<()> {
        // SAFETY: `sync` takes no arguments and cannot fail.
        unsafe { libc::sync() };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_existing_directories_and_skips_missing_ones() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        let missing = dir.path().join("missing");
        flush_filesystems(&[dir.path(), &missing, dir.path()]).unwrap();
    }
}
