//! The one-node Slurm cluster `.ci/slurm-up` starts, shared by the tests that need it
//! (tests/slurm.rs, tests/executors.rs).

use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// The cluster is shared: one test at a time, so time limits are not eaten by queueing.
static CLUSTER: Mutex<()> = Mutex::new(());

/// The cluster, held for one test; `None` (the test says it skipped) where there is none,
/// except under CI (`CI` set), where a missing cluster is a failure: `.ci/run` starts one.
pub fn cluster() -> Option<MutexGuard<'static, ()>> {
    let up = Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    if !up {
        assert!(
            std::env::var_os("CI").is_none(),
            "no Slurm cluster here; .ci/run starts one with .ci/slurm-up"
        );
        eprintln!("skipped: no Slurm cluster (run .ci/slurm-up to start a one-node one)");
        return None;
    }
    Some(CLUSTER.lock().unwrap_or_else(|e| e.into_inner()))
}
