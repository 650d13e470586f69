//! Runs that wrote their trace as they trained, so that a later [`Engine::trace`] of the same
//! run copies it instead of training again. A mutation run judged at the trace level has its
//! trace already; localizing the bug it caught asks for the same trace.
//!
//! Engines are deterministic for a given computation, so two requests that differ only in the
//! levels asked and the output directory trace the same values — as long as both trace the
//! same number of steps, which is part of the key.
//!
//! [`Engine::trace`]: crate::Engine::trace

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::artifact::files::{TRACE, TRACE_INDEX};
use crate::engine::{EngineError, RunRequest};

/// How many runs are remembered: a sweep's process runs thousands, and a trace is asked for
/// right after the run that wrote it.
const KEPT: usize = 64;

/// The traced runs of one engine in this process, newest last: each run's key, directory and
/// its trace files as they were written.
#[derive(Default)]
pub struct TracedRuns {
    runs: Mutex<Vec<(String, PathBuf, Option<Written>)>>,
}

/// A trace's files as recorded (sizes and modification times): a directory another run has
/// written since, or one emptied, no longer matches, so no trace is ever borrowed.
type Written = [(u64, std::time::SystemTime); 2];

fn written(dir: &Path) -> Option<Written> {
    let stat = |name: &str| -> Option<(u64, std::time::SystemTime)> {
        let m = std::fs::metadata(dir.join(name)).ok()?;
        Some((m.len(), m.modified().ok()?))
    };
    Some([stat(TRACE)?, stat(TRACE_INDEX)?])
}

impl TracedRuns {
    /// `req`'s run wrote the trace of its first `steps` steps into `req.out` (their backward
    /// passes too where `backward`: a run of the first forward alone traces only that).
    pub fn record(&self, req: &RunRequest<'_>, steps: usize, backward: bool) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        if runs.len() >= KEPT {
            runs.remove(0);
        }
        let k = key(req, steps, backward);
        runs.push((k, req.out.to_path_buf(), written(req.out)));
    }

    /// The directory of a run that computed what `req` does and traced `steps` steps (with
    /// their backward passes where `backward`), whose trace files are still there as that run
    /// wrote them.
    pub fn find(&self, req: &RunRequest<'_>, steps: usize, backward: bool) -> Option<PathBuf> {
        let want = key(req, steps, backward);
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.iter()
            .rev()
            .find(|(k, dir, w)| *k == want && w.is_some() && written(dir) == *w)
            .map(|(_, dir, _)| dir.clone())
    }
}

/// What a run computes, as a key: the same key, the same trace.
fn key(req: &RunRequest<'_>, steps: usize, backward: bool) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {steps} {backward}",
        req.model, req.training, req.dtype, req.mesh, req.mutation, req.reference
    )
}

/// Copy a traced run's trace files from `from` into `to` (created if missing; nothing to do
/// where it is `from` itself, which a copy onto itself would truncate).
pub fn copy_trace(from: &Path, to: &Path) -> Result<(), EngineError> {
    std::fs::create_dir_all(to).map_err(EngineError::io("creating", to))?;
    let same = |p: &Path| std::fs::canonicalize(p).ok();
    if same(from).is_some() && same(from) == same(to) {
        return Ok(());
    }
    for name in [TRACE, TRACE_INDEX] {
        let (src, dest) = (from.join(name), to.join(name));
        // A link where it can be made: nothing rewrites a trace file in place (a kept trace
        // is cut by writing a new file over the name), so both names keep what was traced.
        let _ = std::fs::remove_file(&dest);
        if std::fs::hard_link(&src, &dest).is_err() {
            std::fs::copy(&src, &dest).map_err(EngineError::io("copying the trace", &src))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshparity_specs::{DType, ModelConfig, Training};

    #[test]
    fn a_run_is_found_by_what_it_computed_and_the_steps_it_traced() {
        let dir = tempfile::tempdir().unwrap();
        let model: ModelConfig = serde_json::from_value(serde_json::json!({
            "family": "llama", "layers": 2, "hidden": 8, "heads": 2, "kv_heads": 2, "ffn": 8,
            "vocab": 16, "seq_len": 4,
        }))
        .unwrap();
        let training: Training = serde_json::from_value(serde_json::json!({
            "seed": 1, "steps": 4, "oracle_steps": 2, "batch": 2, "optimizer": "adamw", "lr": 1e-3,
        }))
        .unwrap();
        let req = RunRequest {
            model: &model,
            training: &training,
            dtype: DType::Bf16,
            mesh: None,
            levels: &[],
            mutation: Some("bug"),
            reference: None,
            out: dir.path(),
            trace: false,
        };
        let runs = TracedRuns::default();
        runs.record(&req, 2, true);
        // Recorded with no files there: never found.
        assert_eq!(runs.find(&req, 2, true), None);
        for name in [TRACE, TRACE_INDEX] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        assert_eq!(runs.find(&req, 2, true), None);
        runs.record(&req, 2, true);
        assert_eq!(runs.find(&req, 2, true).as_deref(), Some(dir.path()));
        // Another step count, the forward alone, another mutation: another run.
        assert_eq!(runs.find(&req, 1, true), None);
        assert_eq!(runs.find(&req, 2, false), None);
        let other = RunRequest {
            mutation: None,
            ..req
        };
        assert_eq!(runs.find(&other, 2, true), None);
        // The levels asked and the output directory are not what a run computes.
        let elsewhere = tempfile::tempdir().unwrap();
        let asked = RunRequest {
            levels: &[meshparity_specs::Level::Forward],
            out: elsewhere.path(),
            ..req
        };
        assert_eq!(runs.find(&asked, 2, true).as_deref(), Some(dir.path()));
        copy_trace(dir.path(), &elsewhere.path().join("t")).unwrap();
        assert!(elsewhere.path().join("t").join(TRACE_INDEX).is_file());
        // Onto itself: left as it was.
        copy_trace(dir.path(), dir.path()).unwrap();
        assert_eq!(std::fs::read(dir.path().join(TRACE)).unwrap(), b"x");
        // Another run's trace written there since: not this run's any more.
        std::fs::write(dir.path().join(TRACE), b"another").unwrap();
        assert_eq!(runs.find(&req, 2, true), None);
    }
}
