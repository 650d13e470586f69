//! The result store: `results.jsonl` in the run directory, one job record per line, written
//! as each job finishes, before the next one starts. A runner killed at any point loses no
//! finished result (the kernel holds what was written); `--resume` reads the last record of
//! each job. The file is flushed to disk at most [`SYNC_EVERY`] apart and when the store
//! closes: a machine that crashes loses at most that much of the log, whose jobs `--resume`
//! runs again, and a sweep of tiny jobs does not wait for the disk once per job.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
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
}

impl Store {
    pub fn open(run_dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(run_dir)?;
        let path = run_dir.join(RESULTS_LOG);
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        drop_torn_line(&file)?;
        Ok(Self {
            path,
            file,
            synced: Instant::now(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn append(&mut self, record: &JobRecord) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(record).expect("records serialize");
        line.push(b'\n');
        self.file.write_all(&line)?;
        if self.synced.elapsed() >= SYNC_EVERY {
            self.file.sync_data()?;
            self.synced = Instant::now();
        }
        Ok(())
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Nothing to report it to any more; every record is already written.
        let _ = self.file.sync_data();
    }
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
        Some(meshparity_engine::Finding::Artifacts(a)) => Path::new(&a.artifacts)
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
