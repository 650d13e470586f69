//! What the benches that drive the real binary share.

use std::process::{Command, Output};
use std::time::Instant;

/// Run `cmd` to its end; its output and wall seconds. A run that fails fails the bench, with
/// what it said: a figure of a failed run would mean nothing.
pub fn timed(cmd: &mut Command) -> (Output, f64) {
    let start = Instant::now();
    let out = cmd.output().unwrap();
    let wall = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out, wall)
}
