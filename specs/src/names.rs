//! The names a spec gives its tables (models, meshes, tolerances, engines, variants): they
//! become parts of job names, directory names and report anchors, so they are checked once
//! here for every kind.

use crate::decode::Ctx;
use crate::diagnostic::Diagnostic;
use crate::source::Located;

/// Names become parts of job names (`model@dtype/mesh/level`) and report anchors.
/// Longest name: names become file and directory names (with a suffix), which most file systems
/// cap at 255 bytes.
pub const MAX_NAME: usize = 100;

/// Names become job names, directory names and report anchors: a letter or digit first, then
/// letters, digits, `_-.+`, at most [`MAX_NAME`] bytes — no path separators, no `..` escape.
pub(crate) fn check_name(cx: &mut Ctx<'_>, kind: &str, name: &Located<String>) -> bool {
    if name.value.len() > MAX_NAME {
        cx.error(
            Diagnostic::error(
                &name.loc,
                format!("{kind} name is {} bytes long", name.value.len()),
            )
            .help(format!(
                "names are at most {MAX_NAME} bytes (they become directory names)"
            )),
        );
        return false;
    }
    let ok = name
        .value
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.+".contains(c));
    if !ok {
        cx.error(
            Diagnostic::error(&name.loc, format!("invalid {kind} name `{}`", name.value))
                .label("not a usable name")
                .help("names start with a letter or digit and use only letters, digits, `_`, `-`, `.`, `+`"),
        );
    }
    ok
}
