//! What a command engine's values may hold, checked when the spec is validated.
//!
//! Each of these was accepted by `validate` and then failed every job of `run` as an
//! infrastructure error (exit 3), or did something worse: a template with a helper or an
//! unquoted value, a log pattern that does not compile, a NUL byte the kernel cannot pass in an
//! argument, an environment key with `=`, a mutation name no report can show, an empty program,
//! an artifact path that reads a file the program never wrote. Each is refused here, at its
//! file:line:column.

use super::EngineDef;
use crate::decode::Ctx;
use crate::diagnostic::Diagnostic;
use crate::env::env_key;
use crate::source::{Loc, Located};
use crate::template;

/// The longest mutation name a command engine may declare (job names, directories and report
/// labels carry it).
pub const MAX_MUTATION_NAME: usize = 64;

/// Report every value of `def` that a job could not use.
pub fn check(cx: &mut Ctx<'_>, def: &EngineDef) {
    if def.program.value.trim().is_empty() {
        cx.error(
            Diagnostic::error(&def.program.loc, "`program` is empty")
                .help("name the executable, e.g. program = \"python3\""),
        );
    }
    // The command's words go to `sh -c` under `shell = true`; the environment and the
    // working directory never reach a shell.
    let mut words: Vec<&Located<String>> = vec![&def.program];
    words.extend(&def.args);
    let mut plain: Vec<&Located<String>> = def.cwd.iter().collect();
    let mut envs: Vec<&(String, Located<String>)> = def.env.iter().collect();
    for m in &def.mutations {
        mutation_name(cx, &m.name);
        words.extend(&m.args);
        envs.extend(&m.env);
    }
    for (key, value) in envs {
        env_key(cx, key, value, false);
        plain.push(value);
    }
    for t in words {
        template_value(cx, t, def.shell);
    }
    for t in plain {
        template_value(cx, t, false);
    }
    artifact_paths(cx, def);
    if let Some(log) = &def.artifacts.log {
        if let Err(e) = crate::log_pattern::pattern(&log.value) {
            cx.error(Diagnostic::error(&log.loc, e.to_string()));
        }
    }
}

/// A template that parses, holds no NUL and, under `shell = true`, no value inside its own
/// quotes.
fn template_value(cx: &mut Ctx<'_>, t: &Located<String>, shell: bool) {
    if let Some(at) = t.value.find('\0') {
        cx.error(
            Diagnostic::error(&inside(t, at), "a NUL byte cannot be passed to a program")
                .help("remove the \\u0000 from the string"),
        );
        return;
    }
    let parsed = if shell {
        template::quoted_value(&t.value)
    } else {
        template::parse(&t.value).map(|_| ())
    };
    if let Err(e) = parsed {
        cx.error(
            Diagnostic::error(&inside(t, e.offset), format!("template: {e}")).help(
                "insert values as {{name}}; `meshparity validate` lists the names a template \
                 may use when one is unknown",
            ),
        );
    }
}

fn mutation_name(cx: &mut Ctx<'_>, name: &Located<String>) {
    let n = &name.value;
    // Job names, `--filter` patterns (split at commas) and directories carry it.
    let odd = n
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.".contains(*c)));
    let why = if n.is_empty() {
        Some("is empty".to_owned())
    } else if n.len() > MAX_MUTATION_NAME {
        Some(format!(
            "is {} bytes long (at most {MAX_MUTATION_NAME})",
            n.len()
        ))
    } else if n.chars().any(char::is_control) {
        Some("holds a control character".to_owned())
    } else {
        odd.map(|c| format!("holds `{c}`: a mutation name is letters, digits, `-`, `_` and `.`"))
    };
    if let Some(why) = why {
        let shown: String = n
            .chars()
            .take(40)
            .collect::<String>()
            .escape_debug()
            .to_string();
        cx.error(
            Diagnostic::error(&name.loc, format!("mutation name `{shown}` {why}"))
                .help("name it in a few words, e.g. skip-grad-all-reduce"),
        );
    }
}

/// Artifact paths stay inside the program's output directory.
fn artifact_paths(cx: &mut Ctx<'_>, def: &EngineDef) {
    let a = &def.artifacts;
    let paths = [
        &a.curve,
        &a.logits,
        &a.grads,
        &a.weights,
        &a.initial,
        &a.roundtrip,
        &a.trace,
        &a.digests,
        &a.optimizer,
    ];
    for path in paths.into_iter().flatten() {
        if let Some(why) = outside_out_dir(&path.value) {
            cx.error(
                Diagnostic::error(&path.loc, format!("artifact path `{}` {why}", path.value)).help(
                    "name a file the program writes inside its output directory \
                         ({{out_dir}}), relative to it, e.g. \"metrics.jsonl\"",
                ),
            );
        }
    }
}

/// Why an artifact path would leave the program's output directory (meshparity would read a
/// file the program never wrote), if it does.
pub fn outside_out_dir(path: &str) -> Option<&'static str> {
    use std::path::Component;
    if path.is_empty() {
        return Some("is empty");
    }
    if path.contains('\0') {
        return Some("holds a NUL byte");
    }
    let p = std::path::Path::new(path);
    if p.is_absolute() {
        return Some("is absolute");
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Some("climbs out with `..`");
    }
    None
}

/// The location of byte `offset` of a string value, where the source spells it as is (a
/// string without escapes); otherwise the whole value's.
fn inside(t: &Located<String>, offset: usize) -> Loc {
    let range = t.loc.range.clone();
    let src = &t.loc.file.text[range.clone()];
    let quote = src.chars().next().filter(|c| *c == '"' || *c == '\'');
    if quote.is_some() && src.len() == t.value.len() + 2 && src[1..src.len() - 1] == t.value {
        let at = range.start + 1 + offset;
        Loc::new(&t.loc.file, at..at + 1)
    } else {
        t.loc.clone()
    }
}
