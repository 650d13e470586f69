//! The result store: `results.jsonl` in the run directory, one job record per line, written
//! as each job finishes, before the next one starts. A runner killed at any point loses no
//! finished result (the kernel holds what was written); `--resume` reads the last record of
//! each job. The file is flushed to disk at most [`SYNC_EVERY`] apart and when the store
//! closes: a machine that crashes loses at most that much of the log, whose jobs `--resume`
//! runs again, and a sweep of tiny jobs does not wait for the disk once per job.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use meshparity_reports::JobRecord;

pub const RESULTS_LOG: &str = "results.jsonl";

/// The longest stretch of records that may be only in the kernel's cache.
pub const SYNC_EVERY: Duration = Duration::from_millis(200);

pub struct Store {
    path: PathBuf,
    file: File,
    synced: Instant,
    /// The first write that failed (a full disk, a log removed under the run): later records
    /// are not appended, the run goes on, and its reports are written from memory.
    failed: Option<String>,
}

impl Store {
    pub fn open(run_dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(run_dir)?;
        let path = run_dir.join(RESULTS_LOG);
        // The log is the run's own regular file: never a link planted in its place (its
        // target was cut back and appended to), never a FIFO or device (a FIFO filled up and
        // blocked the run; /dev/null lost every record).
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| not_own(&path, e))?;
        if !file.metadata()?.is_file() {
            return Err(not_own(
                &path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        drop_torn_line(&file)?;
        Ok(Self {
            path,
            file,
            synced: Instant::now(),
            failed: None,
        })
    }

    /// Why the log stopped taking records, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append `record`; a failure is kept ([`Store::failure`]), not returned: the run's
    /// results are still in memory, and its reports are what must not be lost.
    pub fn append(&mut self, record: &JobRecord) {
        if self.failed.is_some() {
            return;
        }
        let mut line = serde_json::to_vec(record).expect("records serialize");
        line.push(b'\n');
        let mut written = self.file.write_all(&line);
        if written.is_ok() && self.synced.elapsed() >= SYNC_EVERY {
            written = self.file.sync_data();
            self.synced = Instant::now();
        }
        if let Err(e) = written {
            self.failed = Some(format!("{}: {e}", self.path.display()));
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Nothing to report it to any more; every record is already written.
        let _ = self.file.sync_data();
    }
}

/// An error opening the log, with its path and what to do.
fn not_own(path: &Path, e: std::io::Error) -> std::io::Error {
    let why = if e.raw_os_error() == Some(libc::ELOOP) {
        "it is a symbolic link".to_owned()
    } else {
        e.to_string()
    };
    std::io::Error::new(
        e.kind(),
        format!(
            "{}: {why}; the results log must be the run's own regular file (remove it, or start \
             a new run)",
            path.display()
        ),
    )
}

/// A runner killed mid-write leaves a last line without its newline; appending after it would
/// glue the next record onto it and lose both. Cut the file back to its last complete line.
fn drop_torn_line(file: &File) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    let mut at = len;
    let mut byte = [0u8; 1];
    while at > 0 {
        file.read_exact_at(&mut byte, at - 1)?;
        if byte[0] == b'\n' {
            break;
        }
        at -= 1;
    }
    if at < len {
        file.set_len(at)?;
    }
    Ok(())
}

/// The last record of every job in a run directory's log. A torn last line (the runner was
/// killed mid-write) is ignored.
/// Whether a passed record can stand in a resumed run: an engine run's (reference, training)
/// only while the artifacts it wrote are still there. A cleared cache otherwise left every
/// check of the resumed run failing with "run that job first", on every retry.
pub fn still_usable(r: &JobRecord) -> bool {
    match &r.detail {
        Some(meshparity_judge::Finding::Artifacts(a)) => Path::new(&a.artifacts)
            .join(crate::worker::RESULT_FILE)
            .is_file(),
        _ => true,
    }
}

pub fn load(run_dir: &Path) -> std::io::Result<HashMap<String, JobRecord>> {
    let bytes = meshparity_files::read(&run_dir.join(RESULTS_LOG), meshparity_files::Limit::JSON)?;
    // Lossy: a torn line may end inside a character; it is dropped below either way.
    let text = String::from_utf8_lossy(&bytes);
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<JobRecord>(l).ok())
        .map(|r| (r.id.clone(), r))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> JobRecord {
        serde_json::from_value(serde_json::json!({
            "id": id, "name": "m@f32/reference", "kind": "reference", "model": "m",
            "dtype": "f32", "world_size": 1, "status": "passed", "summary": "ok", "seconds": 0.0
        }))
        .unwrap()
    }

    /// A log that stops taking records (here: a descriptor that cannot write) is said once and
    /// never stops the run; what was written before stays.
    #[test]
    fn a_log_that_cannot_be_written_is_kept_as_a_failure_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.append(&record("0000000000000001"));
        store.file = File::open(store.path()).unwrap();
        store.append(&record("0000000000000002"));
        store.append(&record("0000000000000003"));
        let why = store.failure().expect("the failure is kept").to_owned();
        assert!(why.contains(RESULTS_LOG), "{why}");
        drop(store);
        assert_eq!(load(dir.path()).unwrap().len(), 1);
    }

    /// A link or a FIFO in the log's place is refused: nothing is written through it, and
    /// opening a FIFO does not block.
    #[test]
    fn a_planted_log_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "keep\n").unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::os::unix::fs::symlink(&target, run.join(RESULTS_LOG)).unwrap();
        let e = Store::open(&run)
            .err()
            .expect("a link is refused")
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
        std::fs::remove_file(run.join(RESULTS_LOG)).unwrap();
        let c = std::ffi::CString::new(run.join(RESULTS_LOG).to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = Store::open(&run)
            .err()
            .expect("a FIFO is refused")
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
