//! Command templates (`program`, `args`, `env`, `cwd`): random texts of braces, quotes,
//! backslashes, shell syntax and value names. Parsing never panics and takes linear time; a
//! template that validate accepts, rendered with hostile values under `shell = true` and run by
//! `sh`, never runs what a value holds.

use std::collections::BTreeMap;
use std::path::Path;

use meshparity_command::template::Renderer;
use meshparity_specs::template::{parse, quoted_value};

use crate::{bounded, env, seed};

/// Pieces of template text: the language's own syntax, shell syntax, and text.
const FRAGMENTS: &[&str] = &[
    "echo ",
    " ",
    "x",
    "=",
    "-",
    "/",
    "'",
    "\"",
    "\\",
    "$",
    "(",
    ")",
    "`",
    ";",
    "|",
    "&",
    "#",
    "\n",
    "{",
    "}",
    "{{",
    "}}",
    "{{{",
    "}}}",
    "{{v}}",
    "{{ v }}",
    "{{w}}",
    "{{out_dir}}",
    "{{#if v}}",
    "{{/if}}",
    "{{> p}}",
    "{{!c}}",
    "{{&v}}",
    "{{0}}",
    "{{a.b}}",
    "{{}}",
    "é",
    "\t",
    "$(",
    "${",
    "<<",
    "<",
    ">",
];

/// Values meant to run a command if anything leaves them unquoted; each holds a character
/// [`shell_quote`](meshparity_command::template::shell_quote) quotes, so the whole value is one
/// quoted word.
const HOSTILE: &[&str] = &[
    "$(touch PWNED)",
    "`touch PWNED`",
    "; touch PWNED",
    "x' ; touch PWNED; '",
    "\"; touch PWNED; \"",
    "a\ntouch PWNED",
    "$(touch${IFS}PWNED)",
    "\\'; touch PWNED #",
    "|touch PWNED",
];

/// The few pieces that decide how a shell reads a value: half the cases are drawn from these
/// alone, so their rare combinations (a backslash before a value, then a quote) come up.
const QUOTING: &[&str] = &["\\", "{{v}}", "'", "\"", " ", "x", "$("];

fn template(rng: &mut fastrand::Rng) -> String {
    let from = if rng.bool() { FRAGMENTS } else { QUOTING };
    (0..rng.usize(1..12))
        .map(|_| from[rng.usize(..from.len())])
        .collect()
}

#[test]
fn templates_parse_in_linear_time_and_values_never_run() {
    let seed = seed(3);
    let count = env("MESHPARITY_FUZZ_TEMPLATES", 5_000);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut accepted, mut refused, mut ran) = (0, 0, 0);
    for n in 0..count {
        let text = template(&mut rng);
        let case = format!("seed {seed} case {n}: {text:?}");
        let checked = {
            let text = text.clone();
            bounded(&case, move || {
                parse(&text).map(|_| ())?;
                quoted_value(&text)
            })
        };
        let Ok(()) = checked else {
            let e = checked.unwrap_err();
            assert!(
                e.offset <= text.len(),
                "{case}: offset {} past the end",
                e.offset
            );
            refused += 1;
            continue;
        };
        accepted += 1;
        let pick = |rng: &mut fastrand::Rng| HOSTILE[rng.usize(..HOSTILE.len())].to_owned();
        let values = BTreeMap::from([
            ("v".to_owned(), pick(&mut rng)),
            ("w".to_owned(), pick(&mut rng)),
            ("out_dir".to_owned(), pick(&mut rng)),
        ]);
        // Names a job does not have: validate refuses them at the spec's line.
        let line = match Renderer::new(values, true).render("args", &text) {
            Ok(line) => line,
            Err(e) if e.to_string().contains("unknown value") => continue,
            Err(e) => panic!("{case}: accepted but not rendered: {e}"),
        };
        // Running every case through a shell would take minutes; one in eight does.
        if n % 8 == 0 {
            ran += 1;
            run_in(dir.path(), &line, &case);
        }
    }
    eprintln!(
        "{count} templates (seed {seed}): {accepted} accepted ({ran} run by sh), {refused} refused"
    );
    assert!(accepted > 0 && refused > 0);

    // Linear time: the largest inputs the language can be handed.
    for text in [
        "{{out_dir}}".repeat(300_000),
        "{{".repeat(500_000),
        "{{a}".repeat(300_000),
        "\\".repeat(1_000_000) + "{{v}}",
        "'".repeat(1_000_001) + "{{v}}",
    ] {
        let len = text.len();
        bounded(&format!("a template of {len} bytes"), move || {
            let t = std::time::Instant::now();
            let _ = parse(&text).map(|_| ()).and_then(|_| quoted_value(&text));
            assert!(t.elapsed().as_secs() < 2, "{len} bytes: {:?}", t.elapsed());
        });
    }
}

/// Run `line` with `sh -c` in `dir`; a file named PWNED there means a value ran.
fn run_in(dir: &Path, line: &str, case: &str) {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let pwned = dir.join("PWNED");
    if pwned.exists() {
        let _ = std::fs::remove_file(&pwned);
        panic!(
            "{case}: a value ran: `sh -c {line:?}` made PWNED ({})",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
