//! Reading only regular files, never more than a limit.

use std::fs::File;
use std::io::{Error, ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The most bytes a read may return. Named per kind of input so the error can say why.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    pub bytes: u64,
    /// What the file was supposed to be, for the message ("a spec", "a results file").
    pub what: &'static str,
}

impl Limit {
    pub const SPEC: Limit = Limit {
        bytes: 16 << 20,
        what: "a spec file",
    };
    pub const JSON: Limit = Limit {
        bytes: 1 << 30,
        what: "a JSON file",
    };
    pub const CURVE: Limit = Limit {
        bytes: 1 << 30,
        what: "a metrics file",
    };
}

/// Open `path` for reading, refusing anything but a regular file.
///
/// The open itself does not block (`O_NONBLOCK`): opening a FIFO for reading otherwise waits
/// for a writer that may never come. The type is checked on the opened descriptor, so a file
/// swapped between a check and the open cannot slip through. `O_NONBLOCK` has no effect on
/// reads of regular files.
pub fn open(path: &Path) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(file);
    }
    let what = kind_name(kind);
    // A directory is named by mistake, not as a stream to capture: no copying advice.
    let advice = if kind.is_dir() {
        "name a file in it"
    } else {
        "copy it to a file first"
    };
    Err(Error::new(
        ErrorKind::InvalidInput,
        format!("it is {what}; only regular files are read ({advice})"),
    ))
}

/// What a file that is not a regular one is, as messages say it.
pub(crate) fn kind_name(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "an unknown kind of file"
    }
}

/// Open a regular file of at most `limit` bytes to read it as a stream (one that parses as it
/// reads needs no copy of the whole file); a file that grows while it is read ends one byte
/// past the limit, which [`read`] refuses and a parser sees as trailing garbage or a cut.
pub fn open_limited(path: &Path, limit: Limit) -> std::io::Result<std::io::Take<File>> {
    let file = open(path)?;
    let len = file.metadata()?.len();
    if len > limit.bytes {
        return Err(too_big(len, limit));
    }
    Ok(file.take(limit.bytes + 1))
}

/// Read a whole regular file of at most `limit` bytes.
pub fn read(path: &Path, limit: Limit) -> std::io::Result<Vec<u8>> {
    let mut file = open_limited(path, limit)?;
    let mut bytes = Vec::with_capacity(file.get_ref().metadata()?.len() as usize);
    // The file may grow while it is read; the cap holds regardless.
    file.read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit.bytes {
        return Err(too_big(bytes.len() as u64, limit));
    }
    Ok(bytes)
}

/// [`read`], then UTF-8, with the byte offset of the first invalid sequence in the error.
pub fn read_to_string(path: &Path, limit: Limit) -> std::io::Result<String> {
    String::from_utf8(read(path, limit)?).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..at];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = at
            - before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        Error::new(
            ErrorKind::InvalidData,
            format!("not UTF-8 at byte {at} (line {line}, column {column})"),
        )
    })
}

fn too_big(len: u64, limit: Limit) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!(
            "{len} bytes is more than {} allows ({} bytes)",
            limit.what, limit.bytes
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_directories_and_fifos_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (path, says) in [
            (fifo.as_path(), "FIFO"),
            (Path::new("/dev/zero"), "character device"),
            (Path::new("/dev/urandom"), "character device"),
            (dir.path(), "directory"),
        ] {
            let err = read(path, Limit::SPEC).unwrap_err();
            assert!(err.to_string().contains(says), "{path:?}: {err}");
        }
    }

    #[test]
    fn size_and_encoding_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 100]).unwrap();
        let small = Limit {
            bytes: 99,
            what: "a test file",
        };
        let err = read(&big, small).unwrap_err().to_string();
        assert!(
            err.contains("100 bytes is more than a test file allows"),
            "{err}"
        );
        assert_eq!(read(&big, Limit::SPEC).unwrap().len(), 100);
        std::fs::write(&big, b"ok\n\xff").unwrap();
        let err = read_to_string(&big, Limit::SPEC).unwrap_err().to_string();
        assert_eq!(err, "not UTF-8 at byte 3 (line 2, column 1)");
    }
}
