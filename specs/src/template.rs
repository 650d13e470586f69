//! The template language of a command engine's `program`, `args`, `env` and `cwd`: text with
//! values inserted as `{{name}}`, and nothing else.
//!
//! Handlebars did this before, and with it came what a value-insertion language does not need:
//! `{{{name}}}` inserted a value unquoted into a `shell = true` line, a recursive inline partial
//! or 5,000 nested `{{#if}}` overflowed the stack, and 300,000 `{{out_dir}}` in one argument
//! rendered in quadratic time. Here a template is parsed once, in one linear pass, at
//! validate time (at the template's file:line:column) and again when a job renders it.
//!
//! With `shell = true` the rendered line goes to `sh -c`, and every value is shell-quoted as it
//! is inserted. A template that puts a value inside its own quotes (`'{{v}}'`, `"{{v}}"`)
//! would undo that quoting, so it is refused.

/// A piece of a parsed template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    /// A value's name, without braces or spaces.
    Value(&'a str),
}

/// Why a template does not parse: the byte offset in its text and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TemplateError {
    pub offset: usize,
    pub message: String,
}

fn error(offset: usize, message: impl Into<String>) -> TemplateError {
    TemplateError {
        offset,
        message: message.into(),
    }
}

/// Parse `text` into literal text and `{{name}}` values.
pub fn parse(text: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = 0;
    while let Some(found) = text[rest..].find("{{") {
        let open = rest + found;
        if open > rest {
            pieces.push(Piece::Text(&text[rest..open]));
        }
        let inner_start = open + 2;
        let Some(close) = text[inner_start..].find("}}") else {
            return Err(error(open, "`{{` without its `}}`"));
        };
        let inner = &text[inner_start..inner_start + close];
        let name = inner.trim();
        if let Some(first) = name.chars().next().filter(|c| "{#/>!&~^".contains(*c)) {
            return Err(error(
                open,
                format!(
                    "`{{{{{first}` is not supported: templates insert values as `{{{{name}}}}` \
                     and nothing else (no helpers, blocks, partials or unescaped values)"
                ),
            ));
        }
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(error(
                open,
                format!("`{{{{{inner}}}}}` is not a value name (letters, digits and `_`)"),
            ));
        }
        pieces.push(Piece::Value(name));
        rest = inner_start + close + 2;
    }
    if rest < text.len() {
        pieces.push(Piece::Text(&text[rest..]));
    }
    Ok(pieces)
}

/// For a `shell = true` template: the first value that stands inside quotes the template
/// opened itself, which would undo meshparity's quoting of it.
pub fn quoted_value(text: &str) -> Result<(), TemplateError> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for piece in parse(text)? {
        match piece {
            Piece::Text(t) => {
                for c in t.chars() {
                    match (quote, c) {
                        _ if escaped => escaped = false,
                        (None | Some('"'), '\\') => escaped = true,
                        (None, '\'' | '"') => quote = Some(c),
                        (Some(q), c) if c == q => quote = None,
                        _ => {}
                    }
                }
            }
            Piece::Value(name) => {
                // The name is a slice of `text`: its `{{` is the last one before it.
                let at = name.as_ptr() as usize - text.as_ptr() as usize;
                let offset = text[..at].rfind("{{").unwrap_or(0);
                if let Some(q) = quote {
                    return Err(error(
                        offset,
                        format!(
                            "`{{{{{name}}}}}` stands inside {q}…{q} quotes of the template: with \
                             shell = true meshparity quotes each value itself, and quotes around it \
                             undo that; remove them"
                        ),
                    ));
                }
                // `\{{v}}'` rendered `\'$(…)''`: the backslash took the quote meshparity opened,
                // and what the value held ran.
                if escaped {
                    return Err(error(
                        offset,
                        format!(
                            "`{{{{{name}}}}}` follows a backslash: with shell = true meshparity \
                             quotes each value itself, and a backslash before it escapes that \
                             quote; remove the backslash"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_text() {
        assert_eq!(
            parse("--out={{ out_dir }}/x{{dp}}").unwrap(),
            [
                Piece::Text("--out="),
                Piece::Value("out_dir"),
                Piece::Text("/x"),
                Piece::Value("dp")
            ]
        );
        assert_eq!(parse("{json: 1}").unwrap(), [Piece::Text("{json: 1}")]);
    }

    #[test]
    fn anything_but_a_value_is_refused_where_it_stands() {
        for (t, at) in [
            ("a {{{v}}}", 2),
            ("{{#if sp}}--sp{{/if}}", 0),
            ("x{{> p}}", 1),
            ("{{v", 0),
            ("{{a.b}}", 0),
            ("{{}}", 0),
        ] {
            assert_eq!(parse(t).unwrap_err().offset, at, "{t}");
        }
    }

    #[test]
    fn many_values_parse_in_linear_time() {
        let t = "{{out_dir}}".repeat(300_000);
        assert_eq!(parse(&t).unwrap().len(), 300_000);
    }

    #[test]
    fn a_value_inside_the_templates_own_quotes_is_refused() {
        for t in [
            "'{{v}}'",
            "\"{{v}}\"",
            "echo \"a {{v}} b\"",
            "x='{{v}}",
            "\\{{v}}'",
            "{{v}}\\{{w}}",
        ] {
            assert!(quoted_value(t).is_err(), "{t}");
        }
        // Located at its braces, whatever spacing came before.
        let e = quoted_value("{{ a }} {{  b  }} '{{c}}'").unwrap_err();
        assert_eq!(e.offset, 19);
        for t in [
            "{{v}}",
            "sh -c 'echo $1' sh {{v}}",
            "echo \"it's\" {{v}}",
            "echo \\' {{v}}",
        ] {
            assert!(quoted_value(t).is_ok(), "{t}");
        }
    }
}
