//! Problems found in a spec, each tied to the place that has to change.
//!
//! Loading never stops at the first problem: every pass pushes into a [`Diagnostics`] list so a
//! user fixes a broken spec in one round instead of one error per run.

use std::fmt;
use std::sync::Arc;

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceSpan};

use crate::source::Loc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Warning,
    Error,
}

/// One problem in a spec file.
#[derive(Clone, Debug)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    pub loc: Loc,
    /// Text under the underline; defaults to nothing.
    pub label: Option<String>,
    /// What to do about it.
    pub help: Option<String>,
    /// Other places that explain this one ("first defined here", "included from here").
    pub related: Vec<(String, Loc)>,
}

impl Diagnostic {
    pub fn error(loc: &Loc, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Error,
            message: message.into(),
            loc: loc.clone(),
            label: None,
            help: None,
            related: Vec::new(),
        }
    }

    pub fn warning(loc: &Loc, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(loc, message)
        }
    }

    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn help_opt(mut self, help: Option<String>) -> Self {
        self.help = help.or(self.help);
        self
    }

    pub fn related(mut self, note: impl Into<String>, loc: &Loc) -> Self {
        self.related.push((note.into(), loc.clone()));
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// This diagnostic as a terminal may show it: a name decoded from the spec (`"a\u001b[2J"`
    /// is a valid TOML key) in a message, label, help or note shown escaped, never obeyed.
    fn shown(&self) -> Diagnostic {
        let esc = |s: &str| meshparity_files::text::escaped(s).into_owned();
        Diagnostic {
            message: esc(&self.message),
            label: self.label.as_deref().map(esc),
            help: self.help.as_deref().map(esc),
            related: self
                .related
                .iter()
                .map(|(n, l)| (esc(n), l.clone()))
                .collect(),
            ..self.clone()
        }
    }

    /// Render for a terminal or a log, `file:line:column` first so editors and CI link to it.
    pub fn render(&self, color: bool) -> String {
        let shown = self.shown();
        let this = &shown;
        let theme = if color {
            GraphicalTheme::unicode()
        } else {
            GraphicalTheme::unicode_nocolor()
        };
        let handler = GraphicalReportHandler::new_themed(theme)
            .with_width(100)
            .with_links(false)
            .with_word_splitter(textwrap::WordSplitter::NoHyphenation);
        let kind = match this.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut out = format!("{kind}: {}: {}\n", this.loc.position(), this.message);
        if let Some(excerpt) = long_line_excerpt(&this.loc) {
            out.push_str(&excerpt);
            if let Some(help) = &this.help {
                out.push_str(&format!("  help: {help}\n"));
            }
            return out;
        }
        let mut block = String::new();
        if handler
            .render_report(
                &mut block,
                &Report {
                    diag: this,
                    source: named_source(&this.loc),
                },
            )
            .is_err()
        {
            out.push_str("  (could not render the source excerpt)\n");
        }
        out.push_str(without_header(&block));
        out
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}",
            self.loc.position(),
            meshparity_files::text::escaped(&self.message)
        )
    }
}

/// Lines longer than this are shown as a window around the column, not whole: a spec with
/// 100,000 rules on one line repeated that 1.5 MB line in every error (gigabytes of output,
/// then an out-of-memory kill), and miette's renderer panics past column 65,535.
pub const LONG_LINE: usize = 240;

/// Characters of a long line shown on each side of the problem.
const WINDOW: usize = 60;

/// For a location on a line longer than [`LONG_LINE`] bytes: that line cut to a window around
/// the location, with its span marked. `None` for an ordinary line (miette renders it).
fn long_line_excerpt(loc: &Loc) -> Option<String> {
    let text = &loc.file.text;
    let start = loc.range.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    if line_end - line_start <= LONG_LINE {
        return None;
    }
    let line = &text[line_start..line_end];
    let at = start - line_start;
    let span = loc.range.end.min(line_end).saturating_sub(start).max(1);
    let before: Vec<char> = line[..at].chars().rev().take(WINDOW).collect();
    let marked: String = line[at..].chars().take(span.min(WINDOW)).collect();
    let marked_len = marked.chars().count().max(1);
    let after: String = line[at..].chars().skip(marked_len).take(WINDOW).collect();
    let head = if before.len() < line[..at].chars().count() {
        "…"
    } else {
        ""
    };
    let tail = if line_end > start + marked.len() + after.len() {
        "…"
    } else {
        ""
    };
    let before: String = before.into_iter().rev().collect();
    let pad = head.chars().count() + before.chars().count();
    let (n, _) = loc.file.line_col(start);
    let gutter = " ".repeat(n.to_string().len());
    Some(format!(
        "{gutter} │ (line {n} is {} characters long: shown around the column)\n{n} │ \
         {head}{before}{marked}{after}{tail}\n{gutter} · {}{}\n",
        line.chars().count(),
        " ".repeat(pad),
        "─".repeat(marked_len)
    ))
}

/// The excerpt without miette's header (`× message`, possibly wrapped over several lines):
/// the line above already says it with its position, and saying it twice reads as two errors.
fn without_header(block: &str) -> &str {
    match block.find("╭─[") {
        Some(at) => &block[block[..at].rfind('\n').map_or(0, |n| n + 1)..],
        None => block,
    }
}

/// Adapter that shows a [`Diagnostic`] (or one of its related notes) to miette.
struct Report<'a> {
    diag: &'a Diagnostic,
    source: NamedSource<Arc<str>>,
}

struct Note<'a> {
    text: &'a str,
    loc: &'a Loc,
    source: NamedSource<Arc<str>>,
}

fn named_source(loc: &Loc) -> NamedSource<Arc<str>> {
    NamedSource::new(loc.file.display_path(), Arc::clone(&loc.file.text)).with_language("toml")
}

fn span(loc: &Loc) -> SourceSpan {
    SourceSpan::new(loc.range.start.into(), loc.range.len())
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.diag, f)
    }
}
impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.diag.message)
    }
}
impl std::error::Error for Report<'_> {}

impl miette::Diagnostic for Report<'_> {
    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.diag.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.diag
            .help
            .as_ref()
            .map(|h| Box::new(h.as_str()) as Box<dyn fmt::Display>)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.source)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let label = LabeledSpan::new_with_span(self.diag.label.clone(), span(&self.diag.loc));
        Some(Box::new(std::iter::once(label)))
    }
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        None
    }
}

impl fmt::Debug for Note<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}
impl fmt::Display for Note<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}
impl std::error::Error for Note<'_> {}
impl miette::Diagnostic for Note<'_> {
    fn severity(&self) -> Option<miette::Severity> {
        Some(miette::Severity::Advice)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.source)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        Some(Box::new(std::iter::once(LabeledSpan::new_with_span(
            None,
            span(self.loc),
        ))))
    }
}

/// Diagnostics rendered at most by [`Diagnostics::render`].
pub const MAX_RENDERED: usize = 50;

/// Ordered collection of problems from every loading pass.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    pub fn has_errors(&self) -> bool {
        self.items.iter().any(Diagnostic::is_error)
    }

    pub fn error_count(&self) -> usize {
        self.items.iter().filter(|d| d.is_error()).count()
    }

    pub fn warning_count(&self) -> usize {
        self.items.len() - self.error_count()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Sort by file, then position, so output reads top to bottom like the file.
    pub fn sort(&mut self) {
        self.items.sort_by(|a, b| {
            (
                a.loc.file.path.as_path(),
                a.loc.range.start,
                a.loc.range.end,
            )
                .cmp(&(
                    b.loc.file.path.as_path(),
                    b.loc.range.start,
                    b.loc.range.end,
                ))
        });
        self.items
            .dedup_by(|a, b| a.message == b.message && a.loc == b.loc);
    }

    /// The diagnostics rendered, the first [`MAX_RENDERED`] of them (the rest counted): a
    /// spec with thousands of errors wrote hundreds of megabytes.
    pub fn render(&self, color: bool) -> String {
        let mut out = String::new();
        for d in self.items.iter().take(MAX_RENDERED) {
            out.push_str(&d.render(color));
            let d = d.shown();
            for (text, loc) in &d.related {
                let note = Note {
                    text,
                    loc,
                    source: named_source(loc),
                };
                let handler = GraphicalReportHandler::new_themed(if color {
                    GraphicalTheme::unicode()
                } else {
                    GraphicalTheme::unicode_nocolor()
                })
                .with_width(100)
                .with_links(false)
                .with_word_splitter(textwrap::WordSplitter::NoHyphenation);
                out.push_str(&format!("note: {}: {text}\n", loc.position()));
                if let Some(excerpt) = long_line_excerpt(loc) {
                    out.push_str(&excerpt);
                    continue;
                }
                let mut block = String::new();
                let _ = handler.render_report(&mut block, &note);
                out.push_str(without_header(&block));
            }
        }
        let more = self.items.len().saturating_sub(MAX_RENDERED);
        if more > 0 {
            out.push_str(&format!(
                "… and {more} more; the first {MAX_RENDERED} are shown (fix those and validate \
                 again)\n"
            ));
        }
        out
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceFile;

    /// A name decoded from a TOML escape reaches the terminal escaped, in the message and in
    /// what the note and help say.
    #[test]
    fn decoded_control_characters_are_shown_escaped() {
        let file = SourceFile::new("s.toml", "[models.\"a\\u001b[2Jb\"]\n");
        let at = Loc::new(&file, 8..21);
        let d = Diagnostic::error(&at, "invalid model name `a\x1b[2Jb`")
            .help("rename `a\x1b[2Jb`")
            .related("`a\x1b]0;t\x07` here", &at);
        let mut all = Diagnostics::default();
        all.push(d);
        for color in [false, true] {
            let text = all.render(color);
            assert!(
                !text.contains("\x1b[2J") && !text.contains('\x07'),
                "{text:?}"
            );
            assert!(text.contains("a\\x1b[2Jb"), "{text}");
        }
    }
}
