//! Text from outside shown on a terminal: a program's output, names read from a file, paths.
//!
//! A program's error line `\r\x1b[2K\x1b[32m  PASSED…` erased the runner's ERROR line and
//! printed a green PASSED in its place; an OSC sequence set the window title; `\x1b[8m` hid
//! what followed. Every byte of such text that reaches a terminal goes through [`escaped`]:
//! control characters (C0, DEL, C1) and the bidirectional overrides that reorder what is
//! shown are written as escapes (`\x1b`, `\r`, `\u{202e}`), so the terminal shows them and
//! does not obey them. The reports (HTML, JUnit, Markdown) strip the same characters.

use std::borrow::Cow;

/// Whether `c` changes what a terminal shows instead of being shown: a control character other
/// than newline and tab, or a bidirectional formatting character.
pub fn is_hostile(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every [`is_hostile`] character written as an escape; newlines and tabs kept.
pub fn escaped(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_hostile) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push(&mut out, c);
    }
    Cow::Owned(out)
}

/// `s` on one line: [`escaped`], and newlines and tabs written as `\n` and `\t` too.
pub fn one_line(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| is_hostile(c) || c == '\n' || c == '\t') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => push(&mut out, c),
        }
    }
    Cow::Owned(out)
}

/// `s` as the tail of a line a person reads as one record (a job's status line): [`escaped`],
/// and every line after the first starting with `gutter`, so that no line of it (a program's
/// output quoted in an error) can pass for a record of its own.
pub fn continued(s: &str, gutter: &str) -> String {
    escaped(s).replace('\n', &format!("\n{gutter}"))
}

fn push(out: &mut String, c: char) {
    use std::fmt::Write;
    match c {
        '\r' => out.push_str("\\r"),
        c if is_hostile(c) && (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if is_hostile(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_shown_not_obeyed() {
        let line = "\r\x1b[2K\x1b[32m  PASSED\x1b]0;title\x07\u{9b}31m \u{202e}gnp.exe";
        let shown = escaped(line);
        assert!(!shown.chars().any(is_hostile), "{shown}");
        assert_eq!(
            shown,
            "\\r\\x1b[2K\\x1b[32m  PASSED\\x1b]0;title\\x07\\x9b31m \\u{202e}gnp.exe"
        );
        assert_eq!(escaped("plain\ttext\nnext"), "plain\ttext\nnext");
        assert!(matches!(escaped("plain"), Cow::Borrowed(_)));
        assert_eq!(one_line("a\nb\tc\x1b"), "a\\nb\\tc\\x1b");
        assert_eq!(continued("err\n  PASSED x", "  | "), "err\n  |   PASSED x");
    }
}
