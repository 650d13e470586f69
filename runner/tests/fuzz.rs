//! Thousands of randomly mutated specs: each must load to a valid spec (and plan) or fail with
//! located errors. Never a panic.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use meshparity_runner::{Filter, Partition, Plan};
use meshparity_specs::{load_text, Disk, SpecError};

/// Fragments that make TOML and spec-level trouble when spliced in anywhere.
const JUNK: &[&str] = &[
    "=",
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    "\"",
    "'",
    ",",
    ".",
    "\n",
    "#",
    "-1",
    "0",
    "4294967296",
    "1e999",
    "nan",
    "inf",
    "true",
    "\"all\"",
    "[models.x]\n",
    "[meshes.y]\ntp = 3\n",
    "[[matrix]]\n",
    "levels = [\"routing\"]\n",
    "include = [\"shared/meshes.toml\"]\n",
    "include = [\"full-sweep.toml\"]\n",
    "dtypes = [\"bf16\"]\n",
    "tolerance = \"tight\"\n",
    "exclude = [{}]\n",
    "é",
    "\u{0}",
    "\t",
    "\r\n",
    "family = \"moe\"\n",
    "sp = true\n",
    "pp = 4\n",
    "experts = 0\n",
];

fn mutate(rng: &mut fastrand::Rng, text: &str) -> String {
    let mut s: Vec<char> = text.chars().collect();
    for _ in 0..rng.usize(1..4) {
        if s.is_empty() {
            s.push('x');
        }
        let at = rng.usize(0..=s.len());
        match rng.u8(0..6) {
            0 => {
                let end = (at + rng.usize(1..20)).min(s.len());
                s.drain(at..end);
            }
            1 | 2 => {
                let junk = JUNK[rng.usize(0..JUNK.len())];
                s.splice(at..at, junk.chars());
            }
            3 => {
                // Swap two lines.
                let text: String = s.iter().collect();
                let mut lines: Vec<&str> = text.lines().collect();
                if lines.len() > 1 {
                    let (a, b) = (rng.usize(0..lines.len()), rng.usize(0..lines.len()));
                    lines.swap(a, b);
                }
                s = lines.join("\n").chars().collect();
            }
            4 => {
                // Replace a digit with another number.
                if let Some(pos) = (at..s.len()).find(|&i| s[i].is_ascii_digit()) {
                    let n = ["3", "0", "7", "128", "99999999999"][rng.usize(0..5)];
                    s.splice(pos..=pos, n.chars());
                }
            }
            _ => {
                // Duplicate a line.
                let text: String = s.iter().collect();
                let mut lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let i = rng.usize(0..lines.len());
                    lines.insert(rng.usize(0..=lines.len()), lines[i]);
                }
                s = lines.join("\n").chars().collect();
            }
        }
    }
    s.into_iter().collect()
}

#[test]
fn thousands_of_mutated_specs_never_panic() {
    let sources = ["quickstart.toml", "full-sweep.toml"];
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let (mut valid, mut invalid) = (0, 0);
    for i in 0..3000 {
        let name = sources[i % sources.len()];
        let path = Path::new("../examples").join(name);
        let original = std::fs::read_to_string(&path).unwrap();
        let text = mutate(&mut rng, &original);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            match load_text(&path, text.clone(), &Disk) {
                Ok(loaded) => {
                    assert!(!loaded.warnings.has_errors());
                    let plan = Plan::build(&loaded.spec);
                    let sel = plan.select(
                        &Filter::parse(&["level!=roundtrip"]).unwrap(),
                        Some(Partition::Hash { shard: 1, total: 2 }),
                    );
                    let _ = meshparity_runner::plan::render::text(&plan, &sel, "x");
                    let _ = loaded.warnings.render(false);
                    true
                }
                Err(SpecError::Invalid(d)) => {
                    assert!(d.error_count() > 0, "an invalid spec must say why");
                    for diag in d.iter() {
                        assert!(diag.loc.range.end <= diag.loc.file.text.len());
                        assert!(
                            diag.to_string().contains(".toml:"),
                            "every error names file:line:col: {diag}"
                        );
                    }
                    let _ = d.render(false);
                    false
                }
                Err(e) => panic!("unexpected error kind {e}"),
            }
        }));
        match outcome {
            Ok(true) => valid += 1,
            Ok(false) => invalid += 1,
            Err(_) => panic!("panic on mutated spec #{i} (from {name}):\n{text}"),
        }
    }
    // The mutations must exercise both outcomes, or this test proves little.
    assert!(
        valid > 100 && invalid > 1000,
        "valid {valid}, invalid {invalid}"
    );
}
