//! `meshparity serve` (hidden): one worker process that runs job after job of the built-in
//! engine, so a job does not pay a process start and its memory faulted in again, nor on a GPU
//! the device's setup and its kernels' compilation (~5 s a job on an H200, ~4 s on Mesa's
//! software adapter).
//!
//! The runner's served executor (runner/src/exec/served.rs) writes one request per line on
//! this process's stdin — the arguments of `meshparity worker` for one attempt, as a JSON
//! array — and reads one reply per line on its stdout, `{"exit": CODE}`, the exit code a
//! worker process of its own would have ended with. Each job's output goes to its own
//! `stdout.log` and `stderr.log` (the protocol has descriptors of its own,
//! [`meshparity_procs::stdio`]). A job that panics or crashes ends the process with it, as it
//! would have ended its own worker: the runner sees no reply, records the exit status and
//! starts a new process for the next job. Stdin closed: the process exits.

use std::io::{BufRead, BufReader, Write};

use clap::Parser;
use meshparity_procs::stdio;

use super::worker;
use crate::exit;

#[derive(clap::Args)]
pub struct Args {
    /// Seconds a job's processes get to end after SIGTERM reaches this process.
    #[arg(long, default_value_t = 5.0)]
    grace: f64,
    /// The run this process serves. Not read: it puts the run's directory on the command line,
    /// where a worker of its own has it, so `ps` (and a search for a run's strays) tells whose
    /// process this is.
    #[arg(long, value_name = "DIR")]
    #[allow(dead_code)]
    run_dir: Option<std::path::PathBuf>,
}

/// One request: `worker ARGS…`, parsed as the `worker` command parses its own.
#[derive(Parser)]
#[command(name = "meshparity", no_binary_name = true)]
enum Request {
    Worker(worker::Args),
}

pub fn run(args: &Args) -> u8 {
    worker::set_up(args.grace);
    meshparity_engine::heap::enable();
    let (requests, mut replies) = match stdio::take_protocol() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: meshparity serve: moving the protocol off stdin/stdout: {e}");
            return exit::SPEC_ERROR;
        }
    };
    let _ = stdio::silence_output();
    let mut served = 0u64;
    for line in BufReader::new(requests).lines() {
        let Ok(line) = line else { break };
        served += 1;
        let code = serve(&line, served);
        // Between jobs nothing writes into the last one's logs.
        let _ = stdio::silence_output();
        if writeln!(replies, "{{\"exit\":{code}}}")
            .and_then(|_| replies.flush())
            .is_err()
        {
            break;
        }
    }
    exit::OK
}

/// Run the job one request line names, its output in its own logs; its exit code.
fn serve(line: &str, served: u64) -> u8 {
    let argv: Vec<String> = match serde_json::from_str(line) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: meshparity serve: a request is not a JSON array of strings: {e}");
            return exit::SPEC_ERROR;
        }
    };
    // The logs first, so even a request that does not parse reports into its job's stderr.
    if let Some(out) = argv
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| argv.get(i + 1))
    {
        let out = std::path::Path::new(out);
        if let Err(e) = stdio::redirect_output(&out.join("stdout.log"), &out.join("stderr.log")) {
            eprintln!(
                "error: meshparity serve: opening the logs in {}: {e}",
                out.display()
            );
            return exit::SPEC_ERROR;
        }
    }
    let code = match Request::try_parse_from(&argv) {
        Ok(Request::Worker(a)) => {
            // Which process served the job, and how many it had served: one device setup for
            // all of them (tests/gpu.rs reads this line).
            println!(
                "served: job {served} of worker process {}",
                std::process::id()
            );
            worker::job(&a)
        }
        Err(e) => {
            eprintln!("error: meshparity serve: {e}");
            exit::SPEC_ERROR
        }
    };
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    code
}
