//! A half-built artifact directory is not left behind by a worker that never finished.
//!
//! An engine run builds its artifacts in `ENTRY.partial-PID` beside their final place and
//! renames them in when sealed. A worker ended by its timeout, a signal or a crash never gets to
//! the rename, and its partial directory (one held a 152 MB program log) stayed in the cache for
//! good. So the worker names the directory it is building in its attempt directory first, and
//! the runner removes what that names once the attempt has ended, however it ended — locally or
//! on a cluster node, since the attempt directory and the cache are where the runner reads
//! them. Its logs (a program's `program.log` and the tail files of one killed while running,
//! bounded by the command engine) move into the attempt directory first: they hold the
//! program's last words, which is why the attempt ended.

use std::path::{Path, PathBuf};

/// The file in an attempt directory that names the partial directory its worker is building.
const MARKER: &str = "partial-dir";

/// What a partial directory's name holds, so the marker can name nothing else.
const PARTIAL: &str = ".partial-";

/// The directory a worker builds `entry`'s artifacts in.
pub(super) fn dir_for(entry: &Path) -> PathBuf {
    entry.with_extension(format!("partial-{}", std::process::id()))
}

/// Record in `attempt` (the worker's output directory) that `partial` is being built.
pub(super) fn begin(attempt: &Path, partial: &Path) {
    let _ = std::fs::write(attempt.join(MARKER), partial.as_os_str().as_encoded_bytes());
}

/// The partial directory was renamed into place (or removed): nothing to clean up.
pub(super) fn end(attempt: &Path) {
    let _ = std::fs::remove_file(attempt.join(MARKER));
}

/// After an attempt ended: remove the partial directory its worker left, if any. Only a
/// directory named as a partial one directly inside one of `roots` (the cache, the run's
/// scratch directory) is removed, whatever the marker says.
pub fn clean_up(attempt: &Path, roots: &[&Path]) {
    let marker = attempt.join(MARKER);
    let Ok(bytes) = std::fs::read(&marker) else {
        return;
    };
    let _ = std::fs::remove_file(&marker);
    let Ok(text) = String::from_utf8(bytes) else {
        return;
    };
    let partial = PathBuf::from(text);
    let named = partial
        .file_name()
        .is_some_and(|n| n.to_string_lossy().contains(PARTIAL));
    let inside = partial.parent().is_some_and(|p| roots.contains(&p));
    let is_dir = std::fs::symlink_metadata(&partial).is_ok_and(|m| m.is_dir());
    if named && inside && is_dir {
        rescue_logs(&partial, attempt);
        let _ = std::fs::remove_dir_all(&partial);
    }
}

/// Move the regular files named `*.log*` directly in `partial` into `attempt` (never over a
/// file already there).
fn rescue_logs(partial: &Path, attempt: &Path) {
    for e in std::fs::read_dir(partial).into_iter().flatten().flatten() {
        let name = e.file_name();
        let is_log = name.to_string_lossy().contains(".log");
        let regular = e.file_type().is_ok_and(|t| t.is_file());
        let to = attempt.join(&name);
        if is_log && regular && std::fs::symlink_metadata(&to).is_err() {
            let _ = std::fs::rename(e.path(), to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partial_directory_of_an_ended_attempt_goes_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let (cache, attempt) = (root.path().join("cache"), root.path().join("attempt"));
        std::fs::create_dir_all(&attempt).unwrap();
        let partial = dir_for(&cache.join("run-0123"));
        std::fs::create_dir_all(partial.join("shards")).unwrap();
        std::fs::write(partial.join("program.log"), "last words").unwrap();
        std::fs::write(partial.join("grads.safetensors"), "x").unwrap();
        begin(&attempt, &partial);
        clean_up(&attempt, &[&cache]);
        assert!(!partial.exists() && cache.exists());
        let rescued = std::fs::read_to_string(attempt.join("program.log")).unwrap();
        assert_eq!(rescued, "last words");
        assert!(!attempt.join("grads.safetensors").exists());
        assert!(!attempt.join(MARKER).exists());

        // A marker naming anything but a partial directory in a root is ignored.
        let other = cache.join("run-0123");
        std::fs::create_dir_all(&other).unwrap();
        for named in [other.clone(), root.path().join("x.partial-1")] {
            std::fs::create_dir_all(&named).unwrap();
            begin(&attempt, &named);
            clean_up(&attempt, &[&cache]);
            assert!(named.exists(), "{}", named.display());
        }

        // A finished attempt leaves no marker.
        begin(&attempt, &partial);
        end(&attempt);
        assert!(!attempt.join(MARKER).exists());
    }
}
