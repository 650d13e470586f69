//! What a checkpoint comparison is asked to do: its tolerance, which tensors are logits or
//! routing, renames and casts. Its own module, so the alignment of two checkpoints and their
//! comparison both read it without importing each other.

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::dtype::TensorDtype;
use crate::tolerance::Tolerance;

pub struct TensorOptions {
    pub tolerance: Tolerance,
    /// Tensors compared as logits (top-1 / top-k over the last dimension).
    pub logits: GlobSet,
    /// Integer tensors compared as MoE top-k routing (expert-set overlap per token).
    pub routing: GlobSet,
    /// Candidate names renamed by prefix before matching (`--rename`).
    pub rename: Vec<Rename>,
    /// Tensors whose float dtypes differ are compared in this dtype (`--cast`).
    pub cast: Option<TensorDtype>,
}

impl Default for TensorOptions {
    fn default() -> Self {
        Self {
            tolerance: Tolerance::default(),
            logits: globs(&["*logits*"]),
            routing: globs(&["*routing*", "*expert_ids*", "*topk_ids*"]),
            rename: Vec::new(),
            cast: None,
        }
    }
}

pub fn globs<S: AsRef<str>>(patterns: &[S]) -> GlobSet {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        if let Ok(g) = Glob::new(p.as_ref()) {
            b.add(g);
        }
    }
    b.build().unwrap_or_else(|_| GlobSet::empty())
}

/// `FROM=TO`: candidate names starting with FROM are compared as TO followed by the rest.
/// A `compare` option's value that does not parse.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("`{0}`: a rename is FROM=TO (e.g. `model.=` drops `model.`)")]
    Rename(String),
    #[error("`{0}`: FROM and TO are both empty")]
    EmptyRename(String),
    #[error("`{0}`: cast to f64, f32, f16 or bf16")]
    Cast(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rename {
    pub from: String,
    pub to: String,
}

impl Rename {
    pub fn parse(s: &str) -> Result<Rename, OptionError> {
        let (from, to) = s
            .split_once('=')
            .ok_or_else(|| OptionError::Rename(s.to_owned()))?;
        if from.is_empty() && to.is_empty() {
            return Err(OptionError::EmptyRename(s.to_owned()));
        }
        Ok(Rename {
            from: from.to_owned(),
            to: to.to_owned(),
        })
    }

    /// `name` as the reference would call it (the first rule that applies), if one does.
    pub fn apply(rules: &[Rename], name: &str) -> Option<String> {
        rules.iter().find_map(|r| {
            name.strip_prefix(&r.from)
                .map(|rest| format!("{}{rest}", r.to))
        })
    }
}
