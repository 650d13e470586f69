//! Characters a report can carry. XML 1.0 has no way to write U+FFFE, U+FFFF, lone surrogates
//! or most C0 controls, not even escaped, and HTML calls them parse errors; a spec path or run
//! name holding one would make the whole junit.xml unreadable to every CI parser. They are
//! replaced with U+FFFD, so the rest of the report survives.

/// Whether XML 1.0 allows `c` (its `Char` production).
fn allowed(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// `text` with every character XML 1.0 cannot carry replaced by U+FFFD.
pub fn xml_safe(text: String) -> String {
    if text.chars().all(allowed) {
        return text;
    }
    text.chars()
        .map(|c| if allowed(c) { c } else { '\u{FFFD}' })
        .collect()
}

/// Characters a page should not carry: control characters other than newline and tab (ANSI
/// escapes start with one).
pub(crate) fn clean(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn noncharacters_and_controls_are_replaced_the_rest_kept() {
        let s = "a\u{FFFE}b\u{FFFF}c\u{1}d\té\u{1F600}".to_owned();
        assert_eq!(
            super::xml_safe(s),
            "a\u{FFFD}b\u{FFFD}c\u{FFFD}d\té\u{1F600}"
        );
    }
}
