//! A small decoder from spanned TOML tables to typed values.
//!
//! serde's derive stops at the first unknown key or wrong type in a table; a QA engineer
//! fixing a spec wants every problem at once, each with its own span. So each spec element
//! reads its table key by key through [`Table`], which records what it asked for (for "did you
//! mean" on unknown keys) and pushes a located error for each value of the wrong type.

use std::sync::Arc;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::device::Device;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::source::{Loc, Located, SourceFile};
use crate::suggest;

/// Shared state of one file's decoding.
pub struct Ctx<'d> {
    pub file: Arc<SourceFile>,
    pub diags: &'d mut Diagnostics,
}

impl Ctx<'_> {
    pub fn loc<T>(&self, s: &Spanned<T>) -> Loc {
        Loc::new(&self.file, s.span())
    }

    pub fn error(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }
}

/// The kind of TOML value, for "expected X, found Y" messages.
pub fn kind_of(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// A keyword-valued enum (`family = "llama"`, `schedule = "1f1b"`).
pub trait Keyword: Sized + Copy + 'static {
    /// What the values are called in messages ("family", "dtype").
    const WHAT: &'static str;
    const ALL: &'static [(&'static str, Self)];
    /// Other spellings people write for a value (`bfloat16`, `float32`): not accepted, but
    /// answered with the value's name, which no edit distance finds.
    const ALIASES: &'static [(&'static str, &'static str)] = &[];

    fn name(self) -> &'static str
    where
        Self: PartialEq,
    {
        Self::ALL
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("?", |(n, _)| n)
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|(_, v)| *v)
    }

    fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|(n, _)| *n).collect()
    }
}

/// Decode a string-valued keyword, reporting the allowed values on a miss.
pub fn keyword<K: Keyword>(cx: &mut Ctx<'_>, v: &Spanned<DeValue<'_>>) -> Option<Located<K>> {
    let loc = cx.loc(v);
    let Some(s) = v.get_ref().as_str() else {
        cx.error(
            Diagnostic::error(
                &loc,
                format!(
                    "expected a {} string, found {}",
                    K::WHAT,
                    kind_of(v.get_ref())
                ),
            )
            .help(format!("one of: {}", suggest::quote_list(&K::names()))),
        );
        return None;
    };
    match K::parse(s) {
        Some(k) => Some(Located::new(k, loc)),
        None => {
            let names = K::names();
            cx.error(
                Diagnostic::error(&loc, format!("unknown {} `{s}`", K::WHAT))
                    .label(format!("not a {}", K::WHAT))
                    .help(
                        match K::ALIASES.iter().find(|(a, _)| a.eq_ignore_ascii_case(s)) {
                            Some((_, name)) => format!("did you mean `{name}`?"),
                            None => suggest::did_you_mean(s, &names, K::WHAT),
                        },
                    ),
            );
            None
        }
    }
}

/// A table being decoded: asks for keys one by one, then reports the keys nobody asked for.
pub struct Table<'a, 'i> {
    table: &'a DeTable<'i>,
    /// Where the table is (its header, or the inline table).
    pub loc: Loc,
    /// Dotted path for messages, e.g. `models.tiny`.
    pub path: String,
    known: Vec<&'static str>,
    /// Whether `rest` took every other key.
    rest_taken: bool,
}

impl<'a, 'i> Table<'a, 'i> {
    pub fn new(table: &'a DeTable<'i>, loc: Loc, path: impl Into<String>) -> Self {
        Self {
            table,
            loc,
            path: path.into(),
            known: Vec::new(),
            rest_taken: false,
        }
    }

    /// Whether the table has no keys at all.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Decode `v` as a table, or report that it is not one.
    pub fn from_value(
        cx: &mut Ctx<'_>,
        v: &'a Spanned<DeValue<'i>>,
        path: impl Into<String>,
    ) -> Option<Self> {
        let path = path.into();
        match v.get_ref() {
            DeValue::Table(t) => Some(Self::new(t, cx.loc(v), path)),
            other => {
                cx.error(Diagnostic::error(
                    &cx.loc(v),
                    format!("`{path}` must be a table, found {}", kind_of(other)),
                ));
                None
            }
        }
    }

    /// The raw value of a key; marks the key as known.
    pub fn get(&mut self, key: &'static str) -> Option<&'a Spanned<DeValue<'i>>> {
        if !self.known.contains(&key) {
            self.known.push(key);
        }
        self.table.get(key)
    }

    /// Span of a key's name (for "defined here" pointers).
    pub fn key_loc(&self, cx: &Ctx<'_>, key: &str) -> Option<Loc> {
        self.table
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == key)
            .map(|(k, _)| cx.loc(k))
    }

    /// Every entry of the table, for tables keyed by user names (`[models.*]`).
    pub fn entries(
        &mut self,
    ) -> impl Iterator<
        Item = (
            &'a Spanned<std::borrow::Cow<'i, str>>,
            &'a Spanned<DeValue<'i>>,
        ),
    > {
        self.table.iter()
    }

    fn type_error(&self, cx: &mut Ctx<'_>, key: &str, v: &Spanned<DeValue<'_>>, expected: &str) {
        cx.error(
            Diagnostic::error(
                &cx.loc(v),
                format!(
                    "`{}.{key}` must be {expected}, found {}",
                    self.path,
                    kind_of(v.get_ref())
                ),
            )
            .label(format!("expected {expected}")),
        );
    }

    pub fn string(&mut self, cx: &mut Ctx<'_>, key: &'static str) -> Option<Located<String>> {
        let v = self.get(key)?;
        match v.get_ref().as_str() {
            Some(s) => Some(Located::new(s.to_owned(), cx.loc(v))),
            None => {
                self.type_error(cx, key, v, "a string");
                None
            }
        }
    }

    pub fn bool(&mut self, cx: &mut Ctx<'_>, key: &'static str) -> Option<Located<bool>> {
        let v = self.get(key)?;
        match v.get_ref().as_bool() {
            Some(b) => Some(Located::new(b, cx.loc(v))),
            None => {
                self.type_error(cx, key, v, "true or false");
                None
            }
        }
    }

    /// A non-negative integer that fits in u64.
    pub fn u64(&mut self, cx: &mut Ctx<'_>, key: &'static str) -> Option<Located<u64>> {
        let v = self.get(key)?;
        let loc = cx.loc(v);
        let Some(i) = v.get_ref().as_integer() else {
            self.type_error(cx, key, v, "a non-negative integer");
            return None;
        };
        match u64::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) => Some(Located::new(n, loc)),
            Err(_) => {
                cx.error(
                    Diagnostic::error(
                        &loc,
                        format!(
                            "`{}.{key}` must be a non-negative integer below 2^64",
                            self.path
                        ),
                    )
                    .label("out of range"),
                );
                None
            }
        }
    }

    /// A size or degree: an integer from 1 to 2^31.
    pub fn positive(&mut self, cx: &mut Ctx<'_>, key: &'static str) -> Option<Located<u32>> {
        let n = self.u64(cx, key)?;
        if n.value == 0 || n.value > 1 << 31 {
            cx.error(
                Diagnostic::error(
                    &n.loc,
                    format!(
                        "`{}.{key}` must be between 1 and 2147483648, found {}",
                        self.path, n.value
                    ),
                )
                .label("out of range"),
            );
            return None;
        }
        Some(Located::new(n.value as u32, n.loc))
    }

    /// A finite, non-negative number (integers accepted).
    pub fn limit(&mut self, cx: &mut Ctx<'_>, key: &'static str) -> Option<Located<f64>> {
        let v = self.get(key)?;
        let loc = cx.loc(v);
        let x = match v.get_ref() {
            DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|i| i as f64),
            _ => {
                self.type_error(cx, key, v, "a number");
                return None;
            }
        };
        match x {
            Some(x) if x.is_finite() && x >= 0.0 => Some(Located::new(x, loc)),
            _ => {
                cx.error(
                    Diagnostic::error(
                        &loc,
                        format!("`{}.{key}` must be a finite number ≥ 0", self.path),
                    )
                    .label("not a usable limit"),
                );
                None
            }
        }
    }

    /// A device string (`cpu`, `gpu`, `gpu:N`), refused at its position when malformed.
    pub fn device(&mut self, cx: &mut Ctx<'_>, key: &'static str) -> Option<Located<Device>> {
        let s = self.string(cx, key)?;
        match s.value.parse::<Device>() {
            Ok(d) => Some(Located::new(d, s.loc)),
            Err(e) => {
                cx.error(
                    Diagnostic::error(&s.loc, e.to_string())
                        .label("not a device")
                        .help("`meshparity list devices` shows what this machine offers"),
                );
                None
            }
        }
    }

    pub fn keyword<K: Keyword>(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &'static str,
    ) -> Option<Located<K>> {
        let v = self.get(key)?;
        keyword(cx, v)
    }

    /// An array of values, each decoded by `item`; a lone value is not accepted (explicit lists
    /// keep specs unambiguous).
    pub fn array<T>(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &'static str,
        mut item: impl FnMut(&mut Ctx<'_>, &'a Spanned<DeValue<'i>>) -> Option<T>,
    ) -> Option<Located<Vec<T>>> {
        let v = self.get(key)?;
        let DeValue::Array(items) = v.get_ref() else {
            self.type_error(cx, key, v, "an array");
            return None;
        };
        let out = items.iter().filter_map(|it| item(cx, it)).collect();
        Some(Located::new(out, cx.loc(v)))
    }

    /// An array of strings.
    pub fn strings(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &'static str,
    ) -> Option<Located<Vec<Located<String>>>> {
        let path = format!("{}.{key}", self.path);
        self.array(cx, key, |cx, it| match it.get_ref().as_str() {
            Some(s) => Some(Located::new(s.to_owned(), cx.loc(it))),
            None => {
                cx.error(Diagnostic::error(
                    &cx.loc(it),
                    format!(
                        "items of `{path}` must be strings, found {}",
                        kind_of(it.get_ref())
                    ),
                ));
                None
            }
        })
    }

    /// Every key no decoder asked for, as the text of its value (strings as written, numbers
    /// and booleans as TOML writes them); tables and arrays are errors. Consumes them, so
    /// `finish` reports nothing more.
    pub fn rest(&mut self, cx: &mut Ctx<'_>) -> Vec<(String, Located<String>)> {
        let mut out = Vec::new();
        for (k, v) in self.table.iter() {
            let name = k.get_ref().as_ref();
            if self.known.contains(&name) {
                continue;
            }
            let text = match v.get_ref() {
                DeValue::String(s) => Some(s.to_string()),
                DeValue::Integer(i) => Some(i.as_str().replace('_', "")),
                DeValue::Float(f) => Some(f.as_str().replace('_', "")),
                DeValue::Boolean(b) => Some(b.to_string()),
                other => {
                    cx.error(Diagnostic::error(
                        &cx.loc(v),
                        format!(
                            "`{}.{name}` must be a string, number or boolean, found {}",
                            self.path,
                            kind_of(other)
                        ),
                    ));
                    None
                }
            };
            if let Some(text) = text {
                out.push((name.to_owned(), Located::new(text, cx.loc(v))));
            }
        }
        self.rest_taken = true;
        out
    }

    /// Report every key that no decoder asked for, with the closest known key.
    pub fn finish(self, cx: &mut Ctx<'_>) {
        if self.rest_taken {
            return;
        }
        for (k, _) in self.table.iter() {
            let name = k.get_ref().as_ref();
            if !self.known.contains(&name) {
                cx.error(
                    Diagnostic::error(
                        &cx.loc(k),
                        format!("unknown key `{name}` in `{}`", self.path),
                    )
                    .label("unknown key")
                    .help(suggest::did_you_mean(name, &self.known, "key")),
                );
            }
        }
    }
}
