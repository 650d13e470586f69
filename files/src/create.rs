//! Creating a file where someone else's program may have planted a link.
//!
//! A user's program writes into the directory meshparity then writes its own files in
//! (`program.log`, `curve.jsonl`). A symlink planted there under one of those names made
//! meshparity write through it, over a file outside the run. [`create`] never follows a link at
//! the last component: a link in the way is removed (the link, not its target) and a new file
//! takes its place.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Create or truncate `path` for writing, replacing a symlink there instead of following it.
pub fn create(path: &Path) -> std::io::Result<File> {
    let open = || {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    };
    match open() {
        // A link (ELOOP), or anything that is not a file we can truncate: take its place.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) || e.kind() == ErrorKind::IsADirectory => {
            std::fs::remove_file(path)?;
            open()
        }
        other => other,
    }
}

/// `std::fs::write` through [`create`].
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    create(path)?.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_link_is_replaced_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, "precious").unwrap();
        let log = dir.path().join("program.log");
        std::os::unix::fs::symlink(&outside, &log).unwrap();
        write(&log, b"ours").unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "ours");
        assert!(!std::fs::symlink_metadata(&log).unwrap().is_symlink());
        // A dangling link too.
        let dangling = dir.path().join("curve.jsonl");
        std::os::unix::fs::symlink(dir.path().join("nowhere/x"), &dangling).unwrap();
        write(&dangling, b"{}").unwrap();
        assert!(!dir.path().join("nowhere").exists());
    }
}
