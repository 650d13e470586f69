//! The Markdown summary of a fixed result set, and hostile text kept inert.

mod common;

use meshparity_reports::markdown::markdown;

#[test]
fn markdown_snapshot() {
    insta::assert_snapshot!(markdown(&common::results(false), "report.html"));
}

#[test]
fn hostile_text_cannot_break_the_table_or_inject_html() {
    let md = markdown(&common::results(true), "report.html");
    assert!(!md.contains("<script>") && !md.contains("<img"), "{md}");
    assert!(!md.contains('\u{1b}'), "{md}");
    for line in md.lines().filter(|l| l.starts_with("| [")) {
        assert_eq!(
            line.matches(" | ").count(),
            2,
            "a cell broke the table: {line}"
        );
    }
}
