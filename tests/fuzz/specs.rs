//! Specs: the examples and the broken-spec corpus, mutated 1–4 times each (lines deleted,
//! duplicated, swapped or cut; values replaced with hostile ones; keys renamed; tables and
//! includes of devices, FIFOs and the spec itself inserted; raw and invalid UTF-8 bytes). Every
//! error located (file:line:column, or the byte offset of text that is not UTF-8).

use std::path::{Path, PathBuf};

use meshparity_specs::SpecError;

use crate::{bounded, env, seed};

const HOSTILE_VALUES: &[&str] = &[
    "-1",
    "0",
    "1e308",
    "-1e308",
    "18446744073709551616",
    "9223372036854775807",
    "4294967296",
    "nan",
    "inf",
    "\"\"",
    "\"x\"",
    "true",
    "[]",
    "{}",
    "[1, \"a\"]",
    "{ a = 1 }",
    "\"../../x\"",
    "\"/abs\"",
    "\"a\u{FFFE}b\"",
    "\"*\"",
    "\"!*\"",
    "\"{{out_dir}}\"",
    "\"{{nope}}\"",
    "1.5",
    "2",
    "3",
    "65536",
    "\"gpu:7\"",
    "\"bf16\"",
    "\"f64\"",
];

const HOSTILE_INCLUDES: &[&str] = &[
    "/dev/zero",
    "/dev/urandom",
    "fifo",
    "/",
    ".",
    "spec.toml",
    "missing.toml",
    "../../../../../../etc/hostname",
];

const HEADERS: &[&str] = &[
    "[models.x]\nlayers = 1\n",
    "[meshes.y]\ndp = 2\n",
    "[[matrix]]\nmodels = [\"x\"]\n",
    "[run]\n",
    "[tolerances.t]\nextends = \"t\"\n",
    "[engines.e]\nkind = \"command\"\nprogram = \"true\"\n",
    "[variants.v]\ngit = \"HEAD\"\n",
    "[mutations]\nselect = [\"all\"]\n",
];

/// The corpus: every example spec and every broken one, copied into `into` with the
/// directory layout kept (so their includes resolve) and a FIFO in every directory.
fn corpus(into: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![
        PathBuf::from("examples"),
        PathBuf::from("specs/tests/broken"),
    ];
    while let Some(dir) = dirs.pop() {
        let copy = into.join(&dir);
        std::fs::create_dir_all(&copy).unwrap();
        let fifo = std::ffi::CString::new(copy.join("fifo").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "toml" || x == "py") {
                let text = std::fs::read_to_string(&p).unwrap();
                std::fs::write(into.join(&p), &text).unwrap();
                if p.extension().is_some_and(|x| x == "toml") {
                    out.push((into.join(&p), text));
                }
            }
        }
    }
    out.sort();
    out
}

fn mutate(rng: &mut fastrand::Rng, text: &str) -> Vec<u8> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut tail: Vec<u8> = Vec::new();
    for _ in 0..rng.usize(1..=4) {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let i = rng.usize(..lines.len());
        match rng.u8(..10) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                let j = rng.usize(..=lines.len());
                lines.insert(j, l);
            }
            2 => {
                let j = rng.usize(..lines.len());
                lines.swap(i, j);
            }
            3 | 4 => {
                if let Some((key, _)) = lines[i].split_once('=') {
                    let v = HOSTILE_VALUES[rng.usize(..HOSTILE_VALUES.len())];
                    lines[i] = format!("{key}= {v}");
                }
            }
            5 => {
                if let Some((_, value)) = lines[i].split_once('=') {
                    let key = [
                        "dp", "tp", "pp", "cp", "ep", "sp", "seq_len", "family", "levels", "x y",
                        "\"\"",
                    ];
                    lines[i] = format!("{} ={value}", key[rng.usize(..key.len())]);
                }
            }
            6 => {
                let h = HEADERS[rng.usize(..HEADERS.len())];
                lines.insert(i, h.to_owned());
            }
            7 => {
                let inc = HOSTILE_INCLUDES[rng.usize(..HOSTILE_INCLUDES.len())];
                lines.insert(0, format!("include = [\"{inc}\"]"));
            }
            8 => {
                let cut = rng.usize(..=lines[i].len());
                let cut = (0..=cut)
                    .rev()
                    .find(|&c| lines[i].is_char_boundary(c))
                    .unwrap_or(0);
                lines[i].truncate(cut);
            }
            _ => {
                // Raw bytes, invalid UTF-8 included, appended at the end.
                let n = rng.usize(1..8);
                tail.extend((0..n).map(|_| rng.u8(..)));
            }
        }
    }
    let mut bytes = lines.join("\n").into_bytes();
    bytes.push(b'\n');
    bytes.extend(tail);
    bytes
}

/// Every error of a spec that did not load says where it is.
fn located(err: &SpecError) -> Result<(), String> {
    match err {
        SpecError::Read { source, .. } => {
            let m = source.to_string();
            if m.contains("UTF-8") && !m.contains("at byte") {
                return Err(format!("UTF-8 error without its byte: {m}"));
            }
            Ok(())
        }
        SpecError::Invalid(diags) => {
            if diags.error_count() == 0 {
                return Err("invalid, with no error".into());
            }
            for line in diags.render(false).lines() {
                let Some(rest) = line.strip_prefix("error: ") else {
                    continue;
                };
                let pos = rest.split(": ").next().unwrap_or("");
                let mut parts = pos.rsplitn(3, ':');
                let col = parts.next().and_then(|c| c.parse::<u32>().ok());
                let line_no = parts.next().and_then(|c| c.parse::<u32>().ok());
                if col.is_none() || line_no.is_none() {
                    return Err(format!("an error without file:line:column: {line}"));
                }
            }
            Ok(())
        }
    }
}

#[test]
fn mutated_specs_never_panic_or_hang_and_every_error_is_located() {
    let seed = seed(0);
    let count = env("MESHPARITY_FUZZ_SPECS", 10_000);
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path());
    assert!(corpus.len() >= 8, "{corpus:?}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut valid, mut invalid) = (0, 0);
    for n in 0..count {
        let (origin, text) = &corpus[rng.usize(..corpus.len())];
        let bytes = mutate(&mut rng, text);
        // Beside its original, so its own includes still resolve.
        let spec = origin.with_file_name(format!("case-{n}.toml"));
        std::fs::write(&spec, &bytes).unwrap();
        let case = format!("seed {seed} case {n} (from {})", origin.display());
        let loaded = {
            let spec = spec.clone();
            bounded(&case, move || {
                let loaded = meshparity_specs::load(&spec);
                if let Ok(l) = &loaded {
                    let plan = meshparity_runner::Plan::build(&l.spec);
                    let filter = meshparity_runner::Filter::parse::<&str>(&[]).unwrap();
                    let _ = plan.select(&filter, None);
                }
                loaded.map(|_| ())
            })
        };
        match loaded {
            Ok(()) => valid += 1,
            Err(e) => {
                invalid += 1;
                if let Err(why) = located(&e) {
                    let kept = dir.keep();
                    panic!("{case}: {why} (kept: {})", kept.join(&spec).display());
                }
            }
        }
        let _ = std::fs::remove_file(&spec);
    }
    eprintln!(
        "{count} mutated specs (seed {seed}): {valid} valid, {invalid} refused with located errors"
    );
    assert!(
        invalid > count / 4 && valid > 0,
        "mutations too weak or too strong"
    );
}

/// `validate` and `plan` of mutated specs on the real binary, each under a 4 GB address-space
/// limit (`ulimit -v 4000000`) and a 10 s deadline: exit codes only from the documented set,
/// never a panic, a hang or a kill, and every error located (also covers the engine support
/// and memory checks).
#[test]
fn mutated_specs_through_the_cli() {
    let seed = seed(1);
    let count = env("MESHPARITY_FUZZ_CLI", 100);
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path());
    let mut rng = fastrand::Rng::with_seed(seed);
    for n in 0..count {
        let (origin, text) = &corpus[rng.usize(..corpus.len())];
        let spec = origin.with_file_name(format!("case-{n}.toml"));
        std::fs::write(&spec, mutate(&mut rng, text)).unwrap();
        for cmd in ["validate", "plan"] {
            let (code, err) = limited(cmd, &spec);
            let unlocated = err
                .lines()
                .filter_map(|l| l.strip_prefix("error: "))
                .find(|l| !error_located(l));
            if !matches!(code, Some(0 | 2 | 4)) || err.contains("panicked") || unlocated.is_some() {
                let text = std::fs::read_to_string(&spec).unwrap_or_default();
                let _ = std::fs::remove_file(&spec);
                panic!("seed {seed} case {n}: `{cmd}` exited {code:?}: {err}\n--- spec:\n{text}");
            }
        }
        let _ = std::fs::remove_file(&spec);
    }
}

/// An error line of the CLI says where: `file:line:column: …`, a byte offset of text that is
/// not UTF-8, or the count of errors not shown.
fn error_located(line: &str) -> bool {
    let pos = line.split(": ").next().unwrap_or("");
    let mut parts = pos.rsplitn(3, ':');
    let numbers = parts.next().is_some_and(|c| c.parse::<u32>().is_ok())
        && parts.next().is_some_and(|c| c.parse::<u32>().is_ok());
    numbers || line.contains("at byte") || line.contains("more error")
}

/// `meshparity CMD SPEC` under a 4 GB address-space limit, killed past 10 s: its exit code
/// (`None`: killed by a signal, the limit's or the deadline's) and stderr.
fn limited(cmd: &str, spec: &Path) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_meshparity"));
    command
        .args([cmd, spec.to_str().unwrap()])
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit with a local struct, between fork and exec (async-signal-safe).
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 4_000_000 * 1024,
                rlim_max: 4_000_000 * 1024,
            };
            libc::setrlimit(libc::RLIMIT_AS, &limit);
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut text);
        text
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`{cmd} {}` still running after 10 s (a hang)",
                spec.display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let err = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    (status.code(), err)
}
