//! A serving worker's standard streams: its protocol moves to descriptors of its own, so what a
//! job prints goes to that job's logs and never into the protocol.
//!
//! A worker that serves many jobs ([`take_protocol`]) reads requests from the pipe that was its
//! stdin and answers on the pipe that was its stdout; fd 0 becomes `/dev/null` (no job reads the
//! runner's requests) and fds 1 and 2 point at the running job's `stdout.log` and `stderr.log`
//! ([`redirect_output`]), as they would in a worker process of its own.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::path::Path;

/// This process's stdin and stdout as the protocol's request and reply streams, moved to new
/// descriptors (close-on-exec); stdin then reads `/dev/null` and stdout is left to
/// [`redirect_output`].
pub fn take_protocol() -> io::Result<(File, File)> {
    let requests = duplicate(0)?;
    let replies = duplicate(1)?;
    let null = File::open("/dev/null")?;
    place(null.into_raw_fd(), 0)?;
    Ok((requests, replies))
}

/// Point fds 1 and 2 at `stdout` and `stderr` (appended to: the runner created them), so the job
/// that runs next writes its logs where a worker process of its own would have.
pub fn redirect_output(stdout: &Path, stderr: &Path) -> io::Result<()> {
    for (path, fd) in [(stdout, 1), (stderr, 2)] {
        let f = OpenOptions::new().append(true).create(true).open(path)?;
        place(f.into_raw_fd(), fd)?;
    }
    Ok(())
}

/// Point fds 1 and 2 at `/dev/null` again: between jobs nothing writes into the last job's logs.
pub fn silence_output() -> io::Result<()> {
    for fd in [1, 2] {
        let null = OpenOptions::new().write(true).open("/dev/null")?;
        place(null.into_raw_fd(), fd)?;
    }
    Ok(())
}

/// A close-on-exec copy of `fd`.
fn duplicate(fd: i32) -> io::Result<File> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a descriptor this process holds; the result is a new
    // descriptor owned by the returned File alone.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` was just opened and nothing else owns it.
    Ok(unsafe { File::from_raw_fd(new) })
}

/// Move `from` onto `to` and close `from`.
fn place(from: i32, to: i32) -> io::Result<()> {
    // SAFETY: dup2 and close on descriptors this process owns; `from` is ours to close.
    let r = unsafe { libc::dup2(from, to) };
    let err = io::Error::last_os_error();
    if from != to {
        // SAFETY: as above.
        unsafe { libc::close(from) };
    }
    if r < 0 {
        return Err(err);
    }
    Ok(())
}
