//! Fuzzing every input surface the project reads from users and their programs: spec text and
//! the files it includes ([`specs`]), the inputs of `compare` ([`compare`]), command templates
//! ([`templates`]), `results.json` for `report` and `report --merge` ([`results`]), and a
//! program's output as the command engine keeps and reads it ([`output`]). Properties: no
//! panic, no hang, and what is refused says where.
//!
//! Bounded for CI (about 20 s in all): each target's case count has its variable
//! (`MESHPARITY_FUZZ_SPECS` default 10,000, `MESHPARITY_FUZZ_CLI` 100, `MESHPARITY_FUZZ_INPUTS`
//! 1,000, `MESHPARITY_FUZZ_TEMPLATES` 5,000, `MESHPARITY_FUZZ_RESULTS` 300,
//! `MESHPARITY_FUZZ_OUTPUTS` 300), all from seed `MESHPARITY_FUZZ_SEED` (default: fixed; printed
//! with every failure). The longer run is documented in docs/runner.md ("Fuzzing").

mod compare;
mod output;
mod results;
mod specs;
mod templates;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;

pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The fuzzing seed, `offset` apart for each target so they draw different cases.
pub fn seed(offset: u64) -> u64 {
    env("MESHPARITY_FUZZ_SEED", 20261124) + offset
}

/// Longer than any case takes; a case past it is a hang.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Run `f` on another thread; panic (naming `case`) if it panics or outlives [`DEADLINE`].
pub fn bounded<T: Send + 'static>(case: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(Ok(v)) => v,
        Ok(Err(_)) => panic!("{case}: panicked"),
        Err(_) => panic!("{case}: still running after {DEADLINE:?} (a hang)"),
    }
}
