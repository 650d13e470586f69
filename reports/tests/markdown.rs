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
    // Every row has as many cells as its table's header.
    let mut header = 0;
    for line in md.lines() {
        if line.starts_with("| job |") {
            header = line.matches(" | ").count();
        } else if line.starts_with("| [") {
            assert_eq!(
                line.matches(" | ").count(),
                header,
                "a cell broke the table: {line}"
            );
        }
    }
}

#[test]
fn performance_figures_are_listed_side_by_side() {
    let md = markdown(&common::results(false), "report.html");
    let table = &md[md
        .find("### Performance (reported, not gated)")
        .expect("the section")..];
    assert!(
        table.contains("| step_time_s | 0.25 | 0.3 | 1.200× |"),
        "{table}"
    );
    assert!(
        !table.contains("| loss |"),
        "gated metrics are verdicts, not figures"
    );
}
