//! Test-only fault injection for the runner's own tests: make chosen jobs panic, abort, hang or
//! exit with a code, so process isolation, timeouts and retries are tested on the real binary.
//!
//! `MESHPARITY_TEST_FAULT=GLOB=KIND[;GLOB=KIND...]`, GLOB over job names, KIND one of `panic`,
//! `abort`, `hang`, `hang-ignore-term` (the job hangs in a process of its own that ignores
//! SIGTERM: only SIGKILL ends it), `exit:N`, `crash-once` (abort on
//! the first attempt only: a flaky job), `sleep:SECS` (wait, then do the job: a job still
//! running when its runner dies), `noop` (pass at once without computing: the
//! scheduler-overhead bench).
//! Compiled only with the `test-faults` feature, which the workspace's dev-dependencies turn on:
//! a binary from `cargo build`, `cargo run` or `cargo install` has no such switch, so a stray
//! variable in a user's environment cannot turn every job green (tests/test-faults-absent.sh).

use globset::Glob;

use super::{WorkerArgs, WorkerError};

pub const ENV: &str = "MESHPARITY_TEST_FAULT";

/// Act out the fault the variable gives job `name`, if any: a `noop` job's result (written),
/// which the worker returns at once, as a job of a serving worker must (it cannot exit).
pub(crate) fn inject(
    args: &WorkerArgs,
    name: &str,
) -> Result<Option<super::WorkerResult>, WorkerError> {
    let Ok(spec) = std::env::var(ENV) else {
        return Ok(None);
    };
    for rule in spec.split(';') {
        let Some((glob, kind)) = rule.rsplit_once('=') else {
            continue;
        };
        let Ok(g) = Glob::new(glob) else { continue };
        if !g.compile_matcher().is_match(name) {
            continue;
        }
        match kind {
            "panic" => panic!("injected panic in {name}"),
            "abort" => std::process::abort(),
            "crash-once" if args.attempt == 1 => std::process::abort(),
            "hang" => loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            },
            "hang-ignore-term" => {
                // A process of the job, as a user's program would be: the worker passes SIGTERM
                // on to it, waits its grace period, then kills it (meshparity_procs::guard).
                // SAFETY: the child calls only async-signal-safe functions (signal, pause).
                unsafe {
                    if libc::fork() == 0 {
                        libc::signal(libc::SIGTERM, libc::SIG_IGN);
                        loop {
                            libc::pause();
                        }
                    }
                }
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                }
            }
            "noop" => {
                let r = super::WorkerResult {
                    status: meshparity_reports::Status::Passed,
                    summary: "no-op (test fault)".into(),
                    seconds: 0.0,
                    cached: false,
                    detail: None,
                    adapter: String::new(),
                    shrink_seconds: 0.0,
                };
                let _ = std::fs::create_dir_all(&args.out);
                let path = args.out.join(super::RESULT_FILE);
                let _ = std::fs::write(path, serde_json::to_vec(&r).expect("results serialize"));
                return Ok(Some(r));
            }
            k if k.starts_with("sleep:") => {
                let secs = k[6..].parse().unwrap_or(1.0f64).clamp(0.0, 3600.0);
                std::thread::sleep(std::time::Duration::from_secs_f64(secs));
                return Ok(None);
            }
            k if k.starts_with("exit:") => {
                eprintln!("injected exit in {name}");
                std::process::exit(k[5..].parse().unwrap_or(3));
            }
            _ => {}
        }
    }
    Ok(None)
}
