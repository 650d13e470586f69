//! One process at a time in a run directory.
//!
//! An advisory `flock` on `<dir>/.lock`, which also holds the holder's process id so the
//! refusal can name it. The kernel drops the lock when the holder exits, however it exits,
//! so a killed run never leaves a stale lock behind (unlike a pid file alone).

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The lock file's name inside a locked directory.
pub const LOCK_FILE: &str = ".lock";

/// A held lock; released on drop (or when the process ends).
#[derive(Debug)]
pub struct Lock {
    _file: File,
    pub path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("`{dir}` is in use by another meshparity process ({holder}); wait for it to finish, or use another output directory", dir = dir.display())]
    Held { dir: PathBuf, holder: String },
    #[error("cannot lock `{dir}`: {source}", dir = dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Lock {
    /// Take the lock on `dir` (which must exist) without waiting.
    pub fn acquire(dir: &Path) -> Result<Lock, LockError> {
        let io = |source| LockError::Io {
            dir: dir.to_owned(),
            source,
        };
        let path = dir.join(LOCK_FILE);
        // Never through a link planted under the lock's name (its target was overwritten with
        // a pid), and never a FIFO or device (opening one for writing can block).
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| io(planted(e, &path)))?;
        if !file.metadata().map_err(io)?.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            )));
        }
        // SAFETY: flock on a descriptor this function owns; no memory is involved.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io(err));
            }
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let holder = match pid.trim() {
                "" => "pid unknown".to_owned(),
                pid => format!("pid {pid}"),
            };
            return Err(LockError::Held {
                dir: dir.to_owned(),
                holder,
            });
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Lock { _file: file, path })
    }
}

/// `ELOOP` from an `O_NOFOLLOW` open, said as what it means.
fn planted(e: std::io::Error, path: &Path) -> std::io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is a symbolic link; a run directory's own files are never opened through one",
                path.display()
            ),
        );
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let dir = tempfile::tempdir().unwrap();
        let held = Lock::acquire(dir.path()).unwrap();
        let err = Lock::acquire(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(held);
        Lock::acquire(dir.path()).unwrap();
    }

    /// A link planted as the lock file is refused; its target keeps its bytes.
    #[test]
    fn a_planted_link_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::os::unix::fs::symlink(&target, run.join(LOCK_FILE)).unwrap();
        let err = Lock::acquire(&run).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
