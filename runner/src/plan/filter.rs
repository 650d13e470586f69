//! `--filter`: pick jobs by model, mesh, level, mutation, dtype or job name, with globs.
//!
//! Syntax: `KEY=GLOB[,GLOB...]` keeps jobs whose KEY matches any glob; `KEY!=GLOB[,...]` keeps
//! jobs whose KEY matches none; a bare `GLOB` matches the job name. Several filters must all
//! hold. A job with no value for a key (a reference job has no mesh) does not match `KEY=`.

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
}

#[derive(Clone, Debug)]
struct Clause {
    key: Key,
    negate: bool,
    globs: GlobSet,
}

/// All clauses of every `--filter`; empty matches everything.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    clauses: Vec<Clause>,
}

impl Filter {
    pub fn parse<S: AsRef<str>>(filters: &[S]) -> Result<Self, FilterError> {
        let mut clauses = Vec::new();
        for f in filters {
            clauses.push(parse_clause(f.as_ref())?);
        }
        Ok(Self { clauses })
    }

    pub fn is_empty(&self) -> bool {
        self.clauses.is_empty()
    }

    pub fn matches(&self, job: &Job) -> bool {
        self.clauses.iter().all(|c| {
            let mut values: Vec<&str> = Vec::new();
            match c.key {
                Key::Model => values.extend(job.models.iter().map(String::as_str)),
                Key::Mesh => values.extend(job.mesh.as_deref()),
                Key::Level => values.push(job.kind.level_name()),
                Key::Mutation => values.extend(job.mutation()),
                Key::Dtype => values.push(job.dtype.as_str()),
                Key::Name => values.push(&job.name),
            }
            let hit = values.iter().any(|v| c.globs.is_match(v));
            hit != c.negate
        })
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
    for glob in patterns.split(',').map(str::trim).filter(|g| !g.is_empty()) {
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
    Ok(Clause { key, negate, globs })
}
