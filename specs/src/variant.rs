//! `[variants.NAME]`: versions of a user's program judged against each other on the same mesh
//! (pithtrain's validate-correctness): the first variant is the baseline, every other one is
//! judged against it. A variant with `git` runs a snapshot of that commit; one without, the
//! working tree as it is. `repeats = 2` on the baseline runs it twice: the run-to-run envelope
//! a curve is judged against (zero for a deterministic program, which is handled).

use crate::decode::{Ctx, Table};
use crate::diagnostic::Diagnostic;
use crate::source::{Loc, Located};

pub const KEYS: &[&str] = &["git", "repeats"];

#[derive(Clone, Debug)]
pub struct Variant {
    pub name: Located<String>,
    /// A commit-ish of the repository holding the spec; `None`: the working tree.
    pub git: Option<Located<String>>,
    /// Runs of this variant (the baseline's second run is the noise envelope).
    pub repeats: u32,
    pub loc: Loc,
}

impl Variant {
    pub fn decode(
        cx: &mut Ctx<'_>,
        name: Located<String>,
        mut t: Table<'_, '_>,
    ) -> Option<Variant> {
        let git = t.string(cx, "git");
        if let Some(g) = &git {
            let bad = g.value.is_empty()
                || g.value.starts_with('-')
                || g.value.chars().any(|c| c.is_whitespace() || c.is_control());
            if bad {
                cx.error(
                    Diagnostic::error(&g.loc, format!("`{}` is not a git revision", g.value))
                        .help("a branch, tag or commit, e.g. git = \"main\""),
                );
            }
        }
        let repeats = t.positive(cx, "repeats").map_or(1, |r| r.value);
        if repeats > 2 {
            cx.error(
                Diagnostic::error(
                    &t.loc,
                    format!("variant `{}`: repeats = {repeats}", name.value),
                )
                .help("1, or 2 for the noise envelope of the baseline"),
            );
        }
        let loc = t.loc.clone();
        t.finish(cx);
        Some(Variant {
            name,
            git,
            repeats,
            loc,
        })
    }
}
