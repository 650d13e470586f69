//! A directory in memory for files that live a fraction of a second.
//!
//! A shrink search writes and deletes a few hundred small files per second (each try is a run
//! of its own: weights, traces, a reference). On ext4 every such file costs an inode
//! allocation that scans for recently deleted inodes, and that scan, not the computation,
//! was most of the quickstart's shrink time. A tmpfs has no inodes on disk to scan.
//!
//! The directory is held by a [`Lock`] like a run directory, so a runner that was killed leaves
//! nothing another cannot tell is abandoned: the next one to open a directory here removes
//! every directory it could have made (named `meshparity-tries-PID-NANOS`, holding a lock
//! file, owned by this user) whose lock it can take — nothing else, whatever its name.

use std::path::{Path, PathBuf};

use crate::Lock;

/// Where memory directories are made on Linux.
pub const SHM: &str = "/dev/shm";

/// The name prefix of memory directories: `meshparity-tries-PID-NANOS`.
const PREFIX: &str = "meshparity-tries-";

/// A directory on a memory filesystem, held by this process and removed on drop.
#[derive(Debug)]
pub struct MemoryDir {
    path: PathBuf,
    lock: Option<Lock>,
}

impl MemoryDir {
    /// A new directory under `root` if `root` is a tmpfs with at least `min_free` bytes free;
    /// `None` otherwise (the caller writes to disk as before). Abandoned directories of earlier
    /// processes under `root` are removed first.
    pub fn create(root: &Path, min_free: u64) -> Option<MemoryDir> {
        if !is_tmpfs_with(root, min_free) {
            return None;
        }
        remove_abandoned(root);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = root.join(format!("{PREFIX}{}-{nanos}", std::process::id()));
        // `create_dir`, not `create_dir_all`: a name someone else made (the directory is
        // world-writable) is refused, not adopted.
        std::fs::create_dir(&path).ok()?;
        let lock = Lock::acquire(&path).ok();
        if lock.is_none() {
            let _ = std::fs::remove_dir_all(&path);
            return None;
        }
        Some(MemoryDir { path, lock })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for MemoryDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        self.lock.take();
    }
}

/// Remove the directories under `root` that a [`MemoryDir`] made (by name and lock file), that
/// this user owns and that no process holds.
fn remove_abandoned(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        if !made_here(&entry.file_name().to_string_lossy()) {
            continue;
        }
        let path = entry.path();
        // Never follow a link, never touch another user's directory.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        // A directory without the lock file was not made here (acquiring would create one).
        let locked = std::fs::symlink_metadata(path.join(crate::LOCK_FILE));
        if !meta.is_dir() || !owned(&meta) || !locked.is_ok_and(|m| m.is_file()) {
            continue;
        }
        if let Ok(lock) = Lock::acquire(&path) {
            let _ = std::fs::remove_dir_all(&path);
            drop(lock);
        }
    }
}

/// Whether `name` is one [`MemoryDir::create`] gives: the prefix, then two numbers.
fn made_here(name: &str) -> bool {
    let numbers = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(pid, nanos)| numbers(pid) && numbers(nanos))
}

fn owned(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and touches no memory.
    meta.uid() == unsafe { libc::geteuid() }
}

/// Whether `root` is a tmpfs directory with `min_free` bytes available.
#[cfg(target_os = "linux")]
pub fn is_tmpfs_with(root: &Path, min_free: u64) -> bool {
    use std::os::unix::ffi::OsStrExt;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(c) = std::ffi::CString::new(root.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `stat` is written by statfs before it is read; `c` outlives the call.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut stat) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)] // the field's type differs between libc targets
    let (kind, free) = (
        stat.f_type as i64,
        (stat.f_bavail as u64).saturating_mul(stat.f_bsize as u64),
    );
    kind == TMPFS_MAGIC && free >= min_free
}

#[cfg(not(target_os = "linux"))]
pub fn is_tmpfs_with(_: &Path, _: u64) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a tmpfs the directory exists while held and is gone after; a directory left by a
    /// process that no longer holds it is removed by the next one, one still held is not.
    #[test]
    fn held_while_alive_removed_when_abandoned() {
        let shm = Path::new(SHM);
        let Some(first) = MemoryDir::create(shm, 0) else {
            assert!(!is_tmpfs_with(shm, 0), "a tmpfs refused a directory");
            return;
        };
        let held = first.path().to_owned();
        assert!(held.is_dir());
        // An abandoned one: made, its lock released, not removed.
        let abandoned = shm.join(format!("{PREFIX}{}-1", std::process::id()));
        std::fs::create_dir_all(abandoned.join("try1")).unwrap();
        drop(Lock::acquire(&abandoned).unwrap());
        // A user's directories that only look alike: another name, or no lock file.
        let user = shm.join(format!("meshparity-out-{}", std::process::id()));
        let unlocked = shm.join(format!("{PREFIX}{}-2", std::process::id()));
        for d in [&user, &unlocked] {
            std::fs::create_dir_all(d.join("keep")).unwrap();
        }
        drop(Lock::acquire(&user).unwrap());
        let second = MemoryDir::create(shm, 0).unwrap();
        assert!(!abandoned.exists(), "an abandoned directory was kept");
        for d in [&user, &unlocked] {
            assert!(d.join("keep").is_dir(), "{} was removed", d.display());
            assert!(!d.join(crate::LOCK_FILE).exists() || d == &user);
            std::fs::remove_dir_all(d).unwrap();
        }
        assert!(held.is_dir(), "a held directory was removed");
        drop(first);
        assert!(!held.exists());
        drop(second);
    }

    /// A filesystem that is not a tmpfs, or one with too little room, gives none.
    #[test]
    fn none_on_disk_or_without_room() {
        let dir = tempfile::tempdir().unwrap();
        if !is_tmpfs_with(dir.path(), 0) {
            assert!(MemoryDir::create(dir.path(), 0).is_none());
        }
        assert!(MemoryDir::create(Path::new(SHM), u64::MAX).is_none());
    }
}
