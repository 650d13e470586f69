//! When a run shrinks. Shrinking costs seconds per failure, and a broken mesh fails many jobs
//! the same way (every seed, every dtype, every level it reaches), so by default only what went
//! wrong shrinks, and only the first job of each kind — the first failed check of each (model,
//! mesh, level) — with the rest pointing at it. A caught mutation is the passing outcome of its
//! job: it shrank by default once (20–31 s a job against 1.4 s, and most of a CI run's time) and
//! now shrinks only under `run --shrink`, which shrinks every failure and every caught mutation;
//! `run --no-shrink` shrinks none.
//!
//! "First" is the first to claim: a job claims its kind by creating a file named after it in
//! the run's claims directory (`create_new`, atomic on every filesystem the runner shares with
//! its workers, Slurm's included), so workers need no channel to the runner.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Seconds each shrinking job may spend, unless `run --shrink=SECONDS` says otherwise.
pub const DEFAULT_SECONDS: f64 = 20.0;

/// The claims directory's name in the run's scratch directory.
pub const CLAIMS: &str = "shrink-claims";

/// What the runner asks of shrinking (`None` in its options: `--no-shrink`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    /// The budget of one job's search.
    pub seconds: f64,
    /// Every failing job shrinks (`--shrink`), not only the first of each kind, and every
    /// caught mutation too.
    pub every: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            seconds: DEFAULT_SECONDS,
            every: false,
        }
    }
}

/// A worker's share of the policy: its budget, and where kinds are claimed (`None`: every
/// failure shrinks).
#[derive(Clone, Debug, PartialEq)]
pub struct Order {
    pub seconds: f64,
    pub claims: Option<PathBuf>,
    /// Where the search makes its tries (`None`: the job's directory).
    pub tries: Option<PathBuf>,
    /// Caught mutations shrink too (`run --shrink`); by default only failures do.
    pub caught: bool,
}

/// What a job's failure is an instance of, for claiming.
pub enum Kind<'a> {
    /// A caught mutation of a model.
    Mutation { model: &'a str, mutation: &'a str },
    /// A failed check of a model on a mesh at a level.
    Check {
        model: &'a str,
        mesh: &'a str,
        level: &'a str,
    },
}

impl Kind<'_> {
    /// A file name for the kind: the words joined, every character outside `[A-Za-z0-9._-]`
    /// replaced, so no name reaches outside the claims directory.
    fn file_name(&self) -> String {
        let words = match self {
            Kind::Mutation { model, mutation } => ["mutation", model, mutation].join("."),
            Kind::Check { model, mesh, level } => ["check", model, mesh, level].join("."),
        };
        words
            .chars()
            .map(|c| match c {
                'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
                _ => '_',
            })
            .collect()
    }
}

/// Whether this job shrinks its failure: always without a claims directory, otherwise when it
/// is the first to claim `kind` (the file holds the claiming job's name). `Err` with the
/// claimant's name when another job shrinks it.
pub fn claim(claims: Option<&Path>, kind: &Kind<'_>, job: &str) -> Result<(), ClaimedBy> {
    let Some(dir) = claims else {
        return Ok(());
    };
    let path = dir.join(kind.file_name());
    let created = std::fs::create_dir_all(dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
    });
    match created {
        Ok(mut f) => {
            let _ = writeln!(f, "{job}");
            Ok(())
        }
        Err(_) => {
            let by = std::fs::read_to_string(&path).unwrap_or_default();
            Err(ClaimedBy(by.trim().to_owned()))
        }
    }
}

/// Another job shrinks this kind: its name.
#[derive(Debug, PartialEq, Eq)]
pub struct ClaimedBy(pub String);

#[cfg(test)]
mod tests {
    use super::{claim, ClaimedBy, Kind};

    #[test]
    fn the_first_job_of_a_kind_claims_it_and_the_rest_learn_who_did() {
        let dir = tempfile::tempdir().unwrap();
        let claims = dir.path().join("claims");
        let kind = Kind::Mutation {
            model: "tiny",
            mutation: "../skip-tp-allreduce",
        };
        assert_eq!(claim(Some(&claims), &kind, "job-a"), Ok(()));
        assert_eq!(
            claim(Some(&claims), &kind, "job-b"),
            Err(ClaimedBy("job-a".to_owned()))
        );
        // Another kind is claimed apart; the name stays inside the directory.
        let other = Kind::Check {
            model: "tiny",
            mesh: "tp2",
            level: "oracle",
        };
        assert_eq!(claim(Some(&claims), &other, "job-b"), Ok(()));
        assert_eq!(std::fs::read_dir(&claims).unwrap().count(), 2);
        // No claims directory: every job shrinks.
        assert_eq!(claim(None, &kind, "job-c"), Ok(()));
    }
}
