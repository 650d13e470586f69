//! A program's output, kept within bounds whatever the program prints.
//!
//! A user's program can print without end (`yes`), print one line of gigabytes, or never print
//! a newline. Kept whole, its output filled ~19 MB/s into each of two log copies (~34 GB per job
//! at the default 900 s timeout), and a line without end grew the worker's memory at ~340 MB/s.
//! Here the output is read in fixed chunks and cut into lines of at most [`Caps::line`] bytes
//! (the rest of a longer line is counted, not kept). `program.log` keeps the first
//! [`Caps::head`] bytes and the last [`Caps::tail`] bytes, with a line saying what was cut
//! between them. The tail is written as it comes, into two files used in turn (each up to half
//! the tail), so a program killed at its timeout still leaves its last words on disk. The
//! worker's own stderr (the job's `stderr.log`) gets the first [`Caps::forward`] bytes.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether programs' output is passed on to this process's stderr ([`Caps::forward`]): on in a
/// worker, whose stderr is its job's log; off in a process that runs engines in-process over a
/// sweep (`meshparity calibrate`, which streamed ~1,000 lines of program output to the user's
/// terminal), where `program.log` beside each run keeps it.
static FORWARD: AtomicBool = AtomicBool::new(true);

/// Pass programs' output on to this process's stderr, or not ([`FORWARD`]); returns what it
/// was, to put back.
pub fn forward_to_stderr(on: bool) -> bool {
    FORWARD.swap(on, Ordering::Relaxed)
}

/// Whether programs' output goes to this process's stderr.
pub fn forwarding() -> bool {
    FORWARD.load(Ordering::Relaxed)
}

/// The bounds on what is kept of a program's output.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Bytes of one line kept; the rest of it is cut and counted.
    pub line: usize,
    /// Bytes kept from the start of the output.
    pub head: u64,
    /// Bytes kept from the end of the output (at least half of it on disk at any time).
    pub tail: u64,
    /// Bytes passed on to the worker's stderr, the job's log.
    pub forward: u64,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            line: 16 * 1024,
            head: 8 << 20,
            tail: 8 << 20,
            forward: 64 * 1024,
        }
    }
}

/// The file of the output's last bytes, while the program runs: `program.log.tail-0`, `-1`.
fn tail_file(log: &Path, i: usize) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(format!(".tail-{i}"));
    PathBuf::from(name)
}

/// `program.log`, written within [`Caps`].
pub struct BoundedLog {
    caps: Caps,
    path: PathBuf,
    head: File,
    head_len: u64,
    /// The tail file in use and its length; the other holds the output before it.
    tail: Option<(usize, File, u64)>,
    /// Bytes and lines in each tail file, counted as they are written.
    in_tail: [(u64, u64); 2],
    /// Bytes and lines dropped from the middle (a tail file reused).
    cut: (u64, u64),
    /// Bytes cut from over-long lines.
    cut_in_lines: u64,
    forwarded: u64,
    forward_noted: bool,
}

impl BoundedLog {
    pub fn create(path: &Path, caps: Caps) -> std::io::Result<Self> {
        Ok(BoundedLog {
            caps,
            path: path.to_path_buf(),
            head: meshparity_files::create(path)?,
            head_len: 0,
            tail: None,
            in_tail: [(0, 0); 2],
            cut: (0, 0),
            cut_in_lines: 0,
            forwarded: 0,
            forward_noted: false,
        })
    }

    /// One line of output (with its newline, if it had one) and the bytes cut from it.
    fn line(&mut self, line: &[u8], cut: u64) {
        self.cut_in_lines += cut;
        let note;
        let line = if cut > 0 {
            let body = line.strip_suffix(b"\n").unwrap_or(line);
            let said = format!(" [meshparity: {cut} more bytes of this line cut]\n");
            note = [body, said.as_bytes()].concat();
            &note[..]
        } else {
            line
        };
        self.forward(line);
        if self.head_len < self.caps.head {
            self.head_len += line.len() as u64;
            let _ = self.head.write_all(line);
            return;
        }
        let half = (self.caps.tail / 2).max(1);
        let switch = match &self.tail {
            None => Some(0),
            Some((i, _, len)) if *len + line.len() as u64 > half && *len > 0 => Some(1 - i),
            Some(_) => None,
        };
        if let Some(next) = switch {
            // The other file's bytes are the oldest kept: they are dropped now.
            let path = tail_file(&self.path, next);
            let (bytes, lines) = std::mem::take(&mut self.in_tail[next]);
            self.cut.0 += bytes;
            self.cut.1 += lines;
            match meshparity_files::create(&path) {
                Ok(f) => self.tail = Some((next, f, 0)),
                Err(_) => return,
            }
        }
        if let Some((i, f, len)) = &mut self.tail {
            *len += line.len() as u64;
            self.in_tail[*i].0 += line.len() as u64;
            self.in_tail[*i].1 += 1;
            let _ = f.write_all(line);
        }
    }

    fn forward(&mut self, line: &[u8]) {
        if !forwarding() {
            return;
        }
        if self.forwarded < self.caps.forward {
            self.forwarded += line.len() as u64;
            let _ = std::io::stderr().write_all(line);
        } else if !self.forward_noted {
            self.forward_noted = true;
            let _ = writeln!(
                std::io::stderr(),
                "[meshparity: the program's output goes on in {} (its first {} and last {} bytes \
                 are kept there)]",
                self.path.display(),
                self.caps.head,
                self.caps.tail
            );
        }
    }

    /// Put the kept tail after the head, with the cut said between them, and remove the tail
    /// files.
    pub fn finish(mut self) -> std::io::Result<()> {
        let Some((current, _, _)) = self.tail.take() else {
            return self.note_cut_lines();
        };
        let older = tail_file(&self.path, 1 - current);
        let newer = tail_file(&self.path, current);
        // Nothing is cut until a tail file is reused.
        if self.cut.0 > 0 {
            writeln!(
                self.head,
                "[meshparity: {} bytes ({} lines) of output cut here; the first {} and the last \
                 {}–{} bytes are kept]",
                self.cut.0,
                self.cut.1,
                self.caps.head,
                self.caps.tail / 2,
                self.caps.tail
            )?;
        }
        for path in [older, newer] {
            if let Ok(mut f) = File::open(&path) {
                std::io::copy(&mut f, &mut self.head)?;
            }
            let _ = std::fs::remove_file(&path);
        }
        self.note_cut_lines()
    }

    fn note_cut_lines(&mut self) -> std::io::Result<()> {
        if self.cut_in_lines > 0 {
            writeln!(
                self.head,
                "[meshparity: {} bytes cut from lines longer than {} bytes]",
                self.cut_in_lines, self.caps.line
            )?;
        }
        self.head.flush()
    }
}

/// Read `stream` to its end in fixed chunks, cut into lines of at most `caps.line` bytes, each
/// handed to `log` (shared by the program's two streams).
pub fn pump(mut stream: impl Read, log: &std::sync::Mutex<BoundedLog>, caps: Caps) {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut line: Vec<u8> = Vec::with_capacity(1024);
    let mut cut: u64 = 0;
    let emit = |line: &mut Vec<u8>, cut: &mut u64| {
        if let Ok(mut l) = log.lock() {
            l.line(line, *cut);
        }
        line.clear();
        *cut = 0;
    };
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        for part in chunk[..n].split_inclusive(|b| *b == b'\n') {
            let room = caps.line.saturating_sub(line.len());
            let body = part.strip_suffix(b"\n").unwrap_or(part);
            let keep = body.len().min(room);
            line.extend_from_slice(&body[..keep]);
            cut += (body.len() - keep) as u64;
            if part.ends_with(b"\n") {
                line.push(b'\n');
                emit(&mut line, &mut cut);
            }
        }
    }
    if !line.is_empty() || cut > 0 {
        line.push(b'\n');
        emit(&mut line, &mut cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8], caps: Caps) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("program.log");
        let log = std::sync::Mutex::new(BoundedLog::create(&path, caps).unwrap());
        pump(input, &log, caps);
        log.into_inner().unwrap().finish().unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "tail files removed");
        String::from_utf8(std::fs::read(&path).unwrap()).unwrap()
    }

    const SMALL: Caps = Caps {
        line: 8,
        head: 20,
        tail: 20,
        forward: 0,
    };

    #[test]
    fn short_output_is_kept_whole() {
        assert_eq!(run(b"a\nbb\nccc", SMALL), "a\nbb\nccc\n");
    }

    #[test]
    fn the_middle_of_a_long_output_is_cut_and_said() {
        let input: String = (0..100).map(|i| format!("{i:04}\n")).collect();
        let log = run(input.as_bytes(), SMALL);
        assert!(log.starts_with("0000\n0001\n0002\n0003\n"), "{log}");
        assert!(log.ends_with("0098\n0099\n"), "{log}");
        assert!(log.contains("of output cut here"), "{log}");
        // Head, the note, and between half and all of the tail.
        assert!(log.len() < 20 + 200 + 20, "{}", log.len());
    }

    #[test]
    fn a_line_without_end_is_cut_and_counted() {
        let input = vec![b'x'; 1_000_000];
        let log = run(&input, SMALL);
        assert!(
            log.starts_with("xxxxxxxx [meshparity: 999992 more bytes"),
            "{log}"
        );
        assert!(
            log.contains("999992 bytes cut from lines longer than 8 bytes"),
            "{log}"
        );
    }
}
