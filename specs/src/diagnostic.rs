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

    /// Render for a terminal or a log, `file:line:column` first so editors and CI link to it.
    pub fn render(&self, color: bool) -> String {
        let theme = if color {
            GraphicalTheme::unicode()
        } else {
            GraphicalTheme::unicode_nocolor()
        };
        let handler = GraphicalReportHandler::new_themed(theme)
            .with_width(100)
            .with_links(false);
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut out = format!("{kind}: {}: {}\n", self.loc.position(), self.message);
        let mut block = String::new();
        if handler
            .render_report(
                &mut block,
                &Report {
                    diag: self,
                    source: named_source(&self.loc),
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
        write!(f, "{}: {}", self.loc.position(), self.message)
    }
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

    /// Every diagnostic rendered, then a one-line count.
    pub fn render(&self, color: bool) -> String {
        let mut out = String::new();
        for d in &self.items {
            out.push_str(&d.render(color));
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
                .with_links(false);
                out.push_str(&format!("note: {}: {text}\n", loc.position()));
                let mut block = String::new();
                let _ = handler.render_report(&mut block, &note);
                out.push_str(without_header(&block));
            }
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
