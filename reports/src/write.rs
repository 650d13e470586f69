//! Atomic report writes: the directory is created, then the file replaced whole.

use std::path::Path;

pub fn atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir_of(path))?;
    meshparity_files::write_atomic(path, bytes)
}

/// [`atomic`] of what `write` streams: a large file is never built in memory first.
pub fn atomic_with(
    path: &Path,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir_of(path))?;
    meshparity_files::write_atomic_with(path, write)
}

fn dir_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}
