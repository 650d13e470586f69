//! `--filter`: pick jobs by model, mesh, level, mutation, dtype or job name, with globs.
//!
//! A term: `KEY=GLOB[,GLOB|GLOB...]` keeps jobs whose KEY matches any glob (`,` and `|` both
//! separate alternatives: `mesh=tp*|pp*`); `KEY!=GLOB[,...]` keeps jobs whose KEY matches none;
//! a bare `GLOB` matches the job name. A job with no value for a key (a reference job has no
//! mesh) does not match `KEY=`. Terms combine with `and`, `or`, `not` and parentheses, words
//! separated by spaces (`not` binds tightest, then `and`, then `or`):
//! `-f 'mesh=tp* or (level=oracle and not dtype=bf16)'`. Several `--filter`s must all hold.

use globset::{GlobSet, GlobSetBuilder};

use super::job::Job;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Model,
    Mesh,
    Level,
    Mutation,
    Dtype,
    Name,
}

const KEYS: &[(&str, Key)] = &[
    ("model", Key::Model),
    ("mesh", Key::Mesh),
    ("level", Key::Level),
    ("mutation", Key::Mutation),
    ("dtype", Key::Dtype),
    ("name", Key::Name),
];

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FilterError {
    #[error("unknown filter key `{key}` in `{filter}`; keys are model, mesh, level, mutation, dtype, name")]
    UnknownKey { filter: String, key: String },
    #[error("bad glob `{glob}` in filter `{filter}`: {reason}")]
    BadGlob {
        filter: String,
        glob: String,
        reason: String,
    },
    #[error("filter `{filter}` has no pattern after `=`")]
    Empty { filter: String },
    #[error("filter `{filter}` {reason} (terms combine as `A and B`, `A or B`, `not A`, `(…)`)")]
    Syntax { filter: String, reason: String },
}

#[derive(Clone, Debug)]
struct Clause {
    key: Key,
    negate: bool,
    globs: GlobSet,
    /// The patterns as written, for hints.
    patterns: Vec<String>,
}

/// A filter expression: terms under `and`, `or`, `not`.
#[derive(Clone, Debug)]
enum Expr {
    Term(Clause),
    Not(Box<Expr>),
    All(Vec<Expr>),
    Any(Vec<Expr>),
}

impl Expr {
    fn matches(&self, job: &Job) -> bool {
        match self {
            Expr::Term(c) => c.matches(job),
            Expr::Not(e) => !e.matches(job),
            Expr::All(es) => es.iter().all(|e| e.matches(job)),
            Expr::Any(es) => es.iter().any(|e| e.matches(job)),
        }
    }
}

/// Every `--filter`'s expression; empty matches everything.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    exprs: Vec<Expr>,
}

impl Filter {
    pub fn parse<S: AsRef<str>>(filters: &[S]) -> Result<Self, FilterError> {
        let exprs = filters
            .iter()
            .map(|f| parse_expr(f.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Self { exprs })
    }

    pub fn is_empty(&self) -> bool {
        self.exprs.is_empty()
    }

    pub fn matches(&self, job: &Job) -> bool {
        self.exprs.iter().all(|e| e.matches(job))
    }
}

impl Clause {
    fn values(key: Key, job: &Job) -> Vec<&str> {
        let mut values: Vec<&str> = Vec::new();
        match key {
            Key::Model => values.extend(job.models.iter().map(String::as_str)),
            Key::Mesh => values.extend(job.mesh.as_deref()),
            Key::Level => values.push(job.kind.level_name()),
            Key::Mutation => values.extend(job.mutation()),
            Key::Dtype => values.push(job.dtype.as_str()),
            Key::Name => values.push(&job.name),
        }
        values
    }

    fn matches(&self, job: &Job) -> bool {
        let hit = Self::values(self.key, job)
            .iter()
            .any(|v| self.globs.is_match(v));
        hit != self.negate
    }
}

impl Expr {
    fn clauses<'a>(&'a self, out: &mut Vec<&'a Clause>) {
        match self {
            Expr::Term(c) => out.push(c),
            Expr::Not(e) => e.clauses(out),
            Expr::All(es) | Expr::Any(es) => es.iter().for_each(|e| e.clauses(out)),
        }
    }
}

impl Filter {
    /// Why a filter that selects nothing might be wrong: each `KEY=PATTERN` no job of `jobs`
    /// has a value for, with the closest value there is (`level=oracel`: did you mean
    /// `oracle`?). A misspelled key was an error; a misspelled value selected nothing, silently.
    pub fn hints(&self, jobs: &[&Job]) -> Vec<String> {
        let mut clauses = Vec::new();
        for e in &self.exprs {
            e.clauses(&mut clauses);
        }
        let mut out = Vec::new();
        for c in clauses.into_iter().filter(|c| c.key != Key::Name) {
            let mut values: Vec<&str> =
                jobs.iter().flat_map(|j| Clause::values(c.key, j)).collect();
            values.sort_unstable();
            values.dedup();
            let (key, _) = KEYS
                .iter()
                .find(|(_, k)| *k == c.key)
                .expect("every key is named");
            for p in &c.patterns {
                let glob = globset::Glob::new(p).map(|g| g.compile_matcher());
                if glob.is_ok_and(|g| values.iter().any(|v| g.is_match(v))) {
                    continue;
                }
                out.push(format!(
                    "`{key}={p}` matches no job's {key}: {}",
                    meshparity_specs::suggest::did_you_mean(p, &values, key)
                ));
            }
        }
        out
    }
}

/// One `--filter` as an expression: a lone term (the common case, and every reproduce line)
/// or terms under `and`/`or`/`not` and parentheses.
fn parse_expr(filter: &str) -> Result<Expr, FilterError> {
    let spaced = filter.replace('(', " ( ").replace(')', " ) ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut p = Parser {
        filter,
        tokens: &tokens,
        at: 0,
    };
    if tokens.is_empty() {
        return Err(p.syntax("is empty"));
    }
    let e = p.or()?;
    match p.tokens.get(p.at) {
        None => Ok(e),
        Some(t) => Err(p.syntax(&format!(
            "has `{t}` where `and`, `or` or the end was expected"
        ))),
    }
}

/// Recursive descent over a filter's words.
struct Parser<'t> {
    filter: &'t str,
    tokens: &'t [&'t str],
    at: usize,
}

impl Parser<'_> {
    fn syntax(&self, what: &str) -> FilterError {
        FilterError::Syntax {
            filter: self.filter.to_owned(),
            reason: what.to_owned(),
        }
    }

    fn eat(&mut self, word: &str) -> bool {
        let hit = self.tokens.get(self.at) == Some(&word);
        self.at += usize::from(hit);
        hit
    }

    fn or(&mut self) -> Result<Expr, FilterError> {
        let mut any = vec![self.and()?];
        while self.eat("or") {
            any.push(self.and()?);
        }
        Ok(if any.len() == 1 {
            any.remove(0)
        } else {
            Expr::Any(any)
        })
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut all = vec![self.unary()?];
        while self.eat("and") {
            all.push(self.unary()?);
        }
        Ok(if all.len() == 1 {
            all.remove(0)
        } else {
            Expr::All(all)
        })
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        if self.eat("not") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.eat("(") {
            let e = self.or()?;
            if !self.eat(")") {
                return Err(self.syntax("has a `(` without its `)`"));
            }
            return Ok(e);
        }
        match self.tokens.get(self.at) {
            Some(&t) if !["and", "or", ")"].contains(&t) => {
                self.at += 1;
                Ok(Expr::Term(parse_clause(t)?))
            }
            Some(t) => Err(self.syntax(&format!("has `{t}` where a term was expected"))),
            None => Err(self.syntax("ends where a term was expected")),
        }
    }
}

/// A glob that matches exactly `name`: its glob characters (`*?[]{}\`) escaped. A mutation
/// job's name holds `[…]`, which a filter read as a character class, so the reproduce line
/// `--filter 'name=…/mutation[dp-skip-grad-all-reduce]'` selected nothing (or failed to parse).
pub fn exact(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if "*?[]{}\\".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn parse_clause(filter: &str) -> Result<Clause, FilterError> {
    let (key, negate, patterns) = match filter.split_once('=') {
        None => (Key::Name, false, filter),
        Some((k, p)) => {
            let (k, negate) = match k.strip_suffix('!') {
                Some(k) => (k, true),
                None => (k, false),
            };
            let key = KEYS
                .iter()
                .find(|(n, _)| *n == k.trim())
                .map(|(_, key)| *key)
                .ok_or_else(|| FilterError::UnknownKey {
                    filter: filter.to_owned(),
                    key: k.to_owned(),
                })?;
            (key, negate, p)
        }
    };
    let mut builder = GlobSetBuilder::new();
    let mut any = false;
    let written: Vec<String> = patterns
        .split([',', '|'])
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_owned)
        .collect();
    for glob in patterns
        .split([',', '|'])
        .map(str::trim)
        .filter(|g| !g.is_empty())
    {
        any = true;
        let g = globset::GlobBuilder::new(glob)
            .literal_separator(false)
            .build()
            .map_err(|e| FilterError::BadGlob {
                filter: filter.to_owned(),
                glob: glob.to_owned(),
                reason: e.kind().to_string(),
            })?;
        builder.add(g);
    }
    if !any {
        return Err(FilterError::Empty {
            filter: filter.to_owned(),
        });
    }
    let globs = builder.build().map_err(|e| FilterError::BadGlob {
        filter: filter.to_owned(),
        glob: patterns.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(Clause {
        key,
        negate,
        globs,
        patterns: written,
    })
}
