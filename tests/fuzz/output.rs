//! A program's output, as the command engine keeps it (`output::pump` into a `BoundedLog`) and
//! reads loss curves from it (`log::curve`, every preset and a user pattern): random streams of
//! lines short and long, with and without newlines, binary bytes and carriage returns, read in
//! random chunk sizes. Properties: no panic; the kept log within its caps, its tail files gone;
//! reading a curve from the largest log the engine keeps takes linear time.

use std::io::Read;

use meshparity_command::log::{curve, pattern, PRESETS};
use meshparity_command::output::{pump, BoundedLog, Caps};

use crate::{bounded, env, seed};

/// A reader that hands out `data` in chunks of random sizes.
struct Chunks {
    data: Vec<u8>,
    at: usize,
    rng: fastrand::Rng,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.data.len() - self.at;
        let n = left.min(buf.len()).min(self.rng.usize(1..=4096));
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Log lines the presets read, broken and not, and noise.
fn line(rng: &mut fastrand::Rng, step: u64) -> Vec<u8> {
    let loss = rng.f64() * 10.0;
    match rng.u8(..10) {
        0 => {
            format!(" iteration {step:>8}/     100 | consumed samples: 8 | lm loss: {loss:.4E} |\n")
                .into_bytes()
        }
        1 => {
            format!("\x1b[32mstep: {step:2}  loss: {loss:7.4}  memory: 1GiB\x1b[39m\n").into_bytes()
        }
        2 => format!("| step {step}/100 | cross-entropy-loss {loss} |\n").into_bytes(),
        3 => format!("step: {step} loss: nan\r\n").into_bytes(),
        4 => vec![b'x'; rng.usize(..100_000)],
        5 => (0..rng.usize(..300)).map(|_| rng.u8(..)).collect(),
        6 => format!("step: {} loss: {}\n", u64::MAX, "9".repeat(400)).into_bytes(),
        _ => b"noise noise noise\n".to_vec(),
    }
}

#[test]
fn program_output_is_kept_within_its_caps_and_read_in_linear_time() {
    let seed = seed(5);
    let count = env("MESHPARITY_FUZZ_OUTPUTS", 300);
    // The fuzzed output stays in its logs, off the test's stderr.
    meshparity_command::output::forward_to_stderr(false);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(seed);
    let patterns: Vec<_> = PRESETS
        .iter()
        .map(|(name, _)| pattern(name).unwrap())
        .chain([pattern(r"(?P<step>\d+)\D+(?P<loss>[0-9.]+)").unwrap()])
        .collect();
    for n in 0..count {
        let data: Vec<u8> = (0..rng.usize(..400))
            .flat_map(|s| line(&mut rng, s as u64))
            .collect();
        let caps = Caps {
            line: rng.usize(1..2_000),
            head: rng.u64(..20_000),
            tail: rng.u64(..20_000),
            forward: 0,
        };
        let path = dir.path().join(format!("program-{n}.log"));
        let case = format!("seed {seed} case {n} ({} bytes, {caps:?})", data.len());
        let reader = Chunks {
            data,
            at: 0,
            rng: fastrand::Rng::with_seed(rng.u64(..)),
        };
        let patterns = patterns.clone();
        let kept_path = path.clone();
        bounded(&case, move || {
            let log = std::sync::Mutex::new(BoundedLog::create(&kept_path, caps).unwrap());
            pump(reader, &log, caps);
            log.into_inner().unwrap().finish().unwrap();
            let kept = std::fs::read(&kept_path).unwrap();
            // Each kept line is at most `caps.line` bytes and the note of its cut; the head may
            // run one line past its cap; two notes of what was cut.
            let line_max = caps.line as u64 + 80;
            let bound = caps.head + caps.tail + 2 * line_max + 400;
            assert!(kept.len() as u64 <= bound, "kept {} > {bound}", kept.len());
            let text = String::from_utf8_lossy(&kept);
            for re in &patterns {
                let _ = curve(&text, re);
            }
        });
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.contains(".tail-"))
            .collect();
        assert!(names.is_empty(), "{case}: tail files left: {names:?}");
        let _ = std::fs::remove_file(&path);
    }

    eprintln!("{count} program outputs (seed {seed}): every kept log within its caps");

    // The largest log the engine keeps (8 MiB head + 8 MiB tail), every line a distinct step.
    let mut big = String::new();
    let mut step = 0u64;
    while big.len() < 16 << 20 {
        big += &format!("step: {step}  loss: 1.5\n");
        step += 1;
    }
    for re in patterns {
        let big = big.clone();
        bounded("a 16 MiB log of distinct steps", move || {
            let t = std::time::Instant::now();
            let _ = curve(&big, &re);
            assert!(t.elapsed().as_secs() < 10, "{:?}", t.elapsed());
        });
    }
}
