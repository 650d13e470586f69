//! Atomic report writes: the directory is created, then the file replaced whole.

use std::path::Path;

pub fn atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    meshparity_files::write_atomic(path, bytes)
}
