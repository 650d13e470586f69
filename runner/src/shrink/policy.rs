//! When a run shrinks. Shrinking costs seconds per failure, and a broken mesh fails many jobs
//! the same way (every seed, every dtype, every level it reaches), so by default only what went
//! wrong shrinks, and only the first job of each kind — the first failed check of each (model,
//! mesh, level) — with the rest pointing at it. A caught mutation is the passing outcome of its
//! job: it shrank by default once (20–31 s a job against 1.4 s, and most of a CI run's time) and
//! now shrinks only under `run --shrink`, which shrinks every failure and every caught mutation;
//! `run --no-shrink` shrinks none.
//!
//! "First" is the first to claim: a job claims its kind by linking a file holding its name into
//! the run's claims directory under the kind's name (a link that fails where one exists is
//! atomic on every filesystem the runner shares with its workers, Slurm's included), so workers
//! need no channel to the runner.

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
        in_name(&words)
    }
}

/// `words` with every character outside `[A-Za-z0-9._-]` replaced: a file name in the claims
/// directory, never a path out of it.
fn in_name(words: &str) -> String {
    words
        .chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .collect()
}

/// Whether this job shrinks its failure: always without a claims directory, otherwise when it
/// is the first to claim `kind` (the file holds the claiming job's name). `Err` with the
/// claimant's name when another job shrinks it.
pub fn claim(claims: Option<&Path>, kind: &Kind<'_>, job: &str) -> Result<(), ClaimedBy> {
    let Some(dir) = claims else {
        return Ok(());
    };
    let path = dir.join(kind.file_name());
    // The claim appears with the claimant's name in it: written beside it, then linked into
    // place, which fails where another job's claim is there. (Creating the file and writing
    // the name after it let a job that lost the race read it empty: `repro in job ""`.)
    let written = written_aside(dir, &kind.file_name(), job);
    let Ok(aside) = written else {
        // Nothing can be written there: this job shrinks (a second repro at worst).
        return Ok(());
    };
    let linked = std::fs::hard_link(&aside, &path);
    let _ = std::fs::remove_file(&aside);
    match linked {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let by = std::fs::read_to_string(&path).unwrap_or_default();
            Err(ClaimedBy(by.trim().to_owned()))
        }
        // Claimed; or the filesystem cannot link, and this job shrinks.
        _ => Ok(()),
    }
}

/// `job`'s name in a file of its own in `dir`, named so that no other claim's can be the same
/// (the job, unique in a run; this process and a count within it).
fn written_aside(dir: &Path, name: &str, job: &str) -> std::io::Result<PathBuf> {
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    std::fs::create_dir_all(dir)?;
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let aside = dir.join(format!(
        ".{name}.{}.{}.{n}",
        in_name(job),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&aside)?;
    writeln!(f, "{job}")?;
    Ok(aside)
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

    /// Jobs racing for one kind: exactly one claims it, and every other reads its name —
    /// never an empty one (a claim created before its name was written was read empty).
    #[test]
    fn a_claim_is_never_seen_without_its_claimants_name() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let claims = dir.path().join("claims");
            let kind = Kind::Check {
                model: "m",
                mesh: "tp2",
                level: "forward",
            };
            let results: Vec<(String, Result<(), ClaimedBy>)> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|i| {
                        let (claims, kind) = (&claims, &kind);
                        s.spawn(move || {
                            let job = format!("job-{round}-{i}");
                            let got = claim(Some(claims), kind, &job);
                            (job, got)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let winners: Vec<&String> = results
                .iter()
                .filter(|(_, r)| r.is_ok())
                .map(|(j, _)| j)
                .collect();
            assert_eq!(winners.len(), 1, "{results:?}");
            for (_, r) in &results {
                if let Err(ClaimedBy(by)) = r {
                    assert_eq!(by, winners[0]);
                }
            }
            assert_eq!(std::fs::read_dir(&claims).unwrap().count(), 1);
        }
    }
}
