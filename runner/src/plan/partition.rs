//! `--partition`: split the filtered jobs into N disjoint shards for N CI machines.
//!
//! `hash:M/N` puts a job in shard M when its id hashes there: stable when other jobs come and
//! go. `count:M/N` deals jobs round-robin in plan order: balanced, but a new job shifts others.
//! Both follow cargo-nextest's conventions (M is 1-based).

use std::fmt;
use std::str::FromStr;

use super::job::JobId;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partition {
    Hash { shard: u64, total: u64 },
    Count { shard: u64, total: u64 },
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PartitionError {
    #[error("partition `{0}` must look like `hash:M/N` or `count:M/N`")]
    Syntax(String),
    #[error("partition `{0}`: need 1 ≤ M ≤ N")]
    Range(String),
}

impl FromStr for Partition {
    type Err = PartitionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = || PartitionError::Syntax(s.to_owned());
        let (kind, rest) = s.split_once(':').ok_or_else(syntax)?;
        let (m, n) = rest.split_once('/').ok_or_else(syntax)?;
        let shard: u64 = m.trim().parse().map_err(|_| syntax())?;
        let total: u64 = n.trim().parse().map_err(|_| syntax())?;
        if shard == 0 || total == 0 || shard > total {
            return Err(PartitionError::Range(s.to_owned()));
        }
        match kind.trim() {
            "hash" => Ok(Partition::Hash { shard, total }),
            "count" => Ok(Partition::Count { shard, total }),
            _ => Err(syntax()),
        }
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partition::Hash { shard, total } => write!(f, "hash:{shard}/{total}"),
            Partition::Count { shard, total } => write!(f, "count:{shard}/{total}"),
        }
    }
}

impl Partition {
    /// Whether the `index`-th filtered job (in plan order), with this id, is in the shard.
    pub fn contains(&self, index: usize, id: JobId) -> bool {
        match *self {
            Partition::Hash { shard, total } => id.0 % total == shard - 1,
            Partition::Count { shard, total } => index as u64 % total == shard - 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        assert_eq!(
            "hash:1/3".parse(),
            Ok(Partition::Hash { shard: 1, total: 3 })
        );
        assert_eq!(
            "count:2/2".parse(),
            Ok(Partition::Count { shard: 2, total: 2 })
        );
        assert!(matches!(
            "hash:0/3".parse::<Partition>(),
            Err(PartitionError::Range(_))
        ));
        assert!(matches!(
            "hash:4/3".parse::<Partition>(),
            Err(PartitionError::Range(_))
        ));
        assert!(matches!(
            "slice:1/3".parse::<Partition>(),
            Err(PartitionError::Syntax(_))
        ));
        assert!(matches!(
            "hash:1".parse::<Partition>(),
            Err(PartitionError::Syntax(_))
        ));
        assert_eq!(
            Partition::Count { shard: 2, total: 5 }.to_string(),
            "count:2/5"
        );
    }
}
