//! Environment tables (`env = { NAME = "value" }` of an engine or an executor): their values
//! read as strings, their names checked as variable names.

use crate::decode::{kind_of, Ctx, Table};
use crate::diagnostic::Diagnostic;
use crate::source::Located;

/// A table of string values (`env`).
pub(crate) fn string_table(
    cx: &mut Ctx<'_>,
    t: &mut Table<'_, '_>,
    key: &'static str,
) -> Vec<(String, Located<String>)> {
    let path = format!("{}.{key}", t.path);
    let Some(v) = t.get(key) else {
        return Vec::new();
    };
    let Some(mut table) = Table::from_value(cx, v, path.clone()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in table.entries() {
        match v.get_ref().as_str() {
            Some(s) => out.push((
                k.get_ref().to_string(),
                Located::new(s.to_owned(), cx.loc(v)),
            )),
            None => cx.error(Diagnostic::error(
                &cx.loc(v),
                format!(
                    "`{path}.{}` must be a string, found {}",
                    k.get_ref(),
                    kind_of(v.get_ref())
                ),
            )),
        }
    }
    out
}

/// An environment variable's name: never empty, `=` or NUL; `shell_name` (a batch script
/// exports it) also letters, digits and `_`, not starting with a digit.
pub(crate) fn env_key(cx: &mut Ctx<'_>, key: &str, value: &Located<String>, shell_name: bool) {
    let identifier = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let why = if key.is_empty() {
        Some("is empty")
    } else if key.contains('=') {
        Some("holds `=`")
    } else if key.contains('\0') {
        Some("holds a NUL byte")
    } else if shell_name && !identifier {
        Some("is not a shell variable name")
    } else {
        None
    };
    if let Some(why) = why {
        cx.error(
            Diagnostic::error(
                &value.loc,
                format!("environment variable name `{}` {why}", key.escape_debug()),
            )
            .help("a variable name is letters, digits and `_`, e.g. XLA_FLAGS"),
        );
    }
}
