//! Spec source files and byte spans into them.
//!
//! Every value the decoder keeps carries a [`Loc`] so that validation, which runs long after
//! parsing, can still point at the exact file, line and column a user has to edit.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One spec file as read from disk, shared by every [`Loc`] into it.
#[derive(Debug)]
pub struct SourceFile {
    /// The path as the user named it (or as resolved relative to the including file).
    pub path: PathBuf,
    /// The file's text.
    pub text: Arc<str>,
}

impl SourceFile {
    pub fn new(path: impl Into<PathBuf>, text: impl Into<Arc<str>>) -> Arc<Self> {
        Arc::new(Self {
            path: path.into(),
            text: text.into(),
        })
    }

    /// The path for messages, with `/` separators on every platform.
    pub fn display_path(&self) -> String {
        self.path.to_string_lossy().replace('\\', "/")
    }

    /// 1-based line and column (in characters) of a byte offset, clamped to the text.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        (line, col)
    }
}

/// A byte range in a spec file.
#[derive(Clone)]
pub struct Loc {
    pub file: Arc<SourceFile>,
    pub range: Range<usize>,
}

impl Loc {
    pub fn new(file: &Arc<SourceFile>, range: Range<usize>) -> Self {
        let len = file.text.len();
        let start = range.start.min(len);
        let end = range.end.clamp(start, len);
        Self {
            file: Arc::clone(file),
            range: start..end,
        }
    }

    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// `file:line:column` of the start of the range.
    pub fn position(&self) -> String {
        let (line, col) = self.file.line_col(self.range.start);
        format!("{}:{line}:{col}", self.file.display_path())
    }
}

impl fmt::Debug for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.position())
    }
}

impl PartialEq for Loc {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.file, &other.file) && self.range == other.range
    }
}

/// A value with the place it was written. Values filled in by defaults carry the location of
/// the table that omitted them, so messages about defaults still point somewhere useful.
#[derive(Clone, Debug, PartialEq)]
pub struct Located<T> {
    pub value: T,
    pub loc: Loc,
}

impl<T> Located<T> {
    pub fn new(value: T, loc: Loc) -> Self {
        Self { value, loc }
    }
}

impl<T> std::ops::Deref for Located<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters_not_bytes() {
        let f = SourceFile::new("a.toml", "x = 1\né = \"ü\" # z\n");
        assert_eq!(f.line_col(0), (1, 1));
        assert_eq!(f.line_col(6), (2, 1));
        let z = f.text.find('z').unwrap();
        assert_eq!(
            f.line_col(z),
            (2, 11),
            "10 characters precede z, 13 bytes do"
        );
        assert_eq!(f.line_col(10_000), (3, 1));
    }
}
