//! `meshparity_hooks.torch` under torchrun on CPU/gloo, at world sizes 2 (tp2) and 4 (dp2·tp2):
//! DTensor, AsyncCollectiveTensor and bf16 tensors written whole by rank 0; one rank's error
//! raised on every rank (a meta tensor on the last rank, an unwritable directory on rank 0,
//! different tensors per rank) instead of a hang; traces of a TP × DP run equal to world size
//! 1's, site by site, in world-size-1 shape; replica digests that see one TP rank's layer norm
//! drift; each rank's inputs gathered into one file the binary reads; a seed checkpoint through torch.distributed.checkpoint and back, bit for bit;
//! transposed, strided and expanded views written by Writer, Recorder and Tracer read back as
//! their logical values (they were written in storage order).
//! The checks are tests/consumers/torch_hooks_check.py; each rank prints `rank R: ok`.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

fn run_at(world: usize) {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = tempfile::tempdir().unwrap();
    // The log goes to a file: a pipe nobody reads while we poll could fill and stall the ranks.
    let log_path = out.path().join("torchrun.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new("python3")
        .args(["-m", "torch.distributed.run", "--standalone"])
        .arg(format!("--nproc-per-node={world}"))
        .arg(format!("{root}/tests/consumers/torch_hooks_check.py"))
        .arg(out.path())
        .env("PYTHONPATH", format!("{root}/python"))
        .env("OMP_NUM_THREADS", "1")
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .unwrap();
    // A hang is the failure the abort path exists to prevent: bound the whole run.
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(240) {
            child.kill().unwrap();
            panic!("world {world}: torchrun still running after 240 s (a rank hung)");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(status.success(), "world {world}: {log}");
    for r in 0..world {
        assert!(
            log.contains(&format!("rank {r}: ok")),
            "world {world}, rank {r}: {log}"
        );
    }
    // The gathered inputs read back as the binary reads them: every rank at both steps.
    let inputs = out.path().join("inputs/inputs.jsonl");
    let read = meshparity_engine::inputs::read(&inputs).unwrap();
    assert_eq!(read.len(), 2, "{read:?}");
    assert!(read.values().all(|ranks| ranks.len() == world), "{read:?}");
}

#[test]
fn torch_hooks_work_on_two_ranks() {
    if common::torch() {
        run_at(2);
    }
}

#[test]
fn torch_hooks_work_on_four_ranks() {
    if common::torch() {
        run_at(4);
    }
}

/// The hooks are versioned with the binary: python/pyproject.toml's version and the package's
/// `__version__` are the workspace's.
#[test]
fn the_hooks_carry_the_binary_version() {
    let root = env!("CARGO_MANIFEST_DIR");
    let version = env!("CARGO_PKG_VERSION");
    let pyproject = std::fs::read_to_string(format!("{root}/python/pyproject.toml")).unwrap();
    assert!(
        pyproject.contains(&format!("version = \"{version}\"")),
        "{pyproject}"
    );
    let init =
        std::fs::read_to_string(format!("{root}/python/meshparity_hooks/__init__.py")).unwrap();
    assert!(init.contains(&format!("__version__ = \"{version}\"")));
}
