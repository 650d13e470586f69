//! Replica digests: each rank's hash and norm of every parameter it holds, grouped by the
//! ranks that must hold the same bytes (`meshparity_hooks.torch.replica_digests`). A torch
//! program's `full_tensor()` of a replicated DTensor returns rank 0's copy, so replicas that
//! drift apart on other ranks (BLOOM-176B's layer norms across TP, found by TrainCheck) never
//! reach the weights file; the digests do, and a group that disagrees is judged as the
//! built-in engine judges replicas that disagree: the oracle level fails, saying which.
//!
//! The file: `{"version": 1, "world_size": N, "groups": [{"param": NAME, "group": KEY,
//! "ranks": [r, …], "digests": [hex, …], "norms": [x, …]}, …]}`.

use std::path::Path;

use serde::Deserialize;

#[derive(Deserialize)]
struct File {
    version: u32,
    groups: Vec<Group>,
}

#[derive(Deserialize)]
struct Group {
    param: String,
    ranks: Vec<u64>,
    digests: Vec<String>,
    norms: Vec<f64>,
}

/// Why the digests in `path` say the replicas disagree (`Ok(None)`: every group agrees), or
/// why the file is unreadable (`Err`).
pub fn disagreement(path: &Path) -> Result<Option<String>, DigestsError> {
    // A regular file, bounded: a FIFO or a runaway writer is an error, never a hang.
    let limit = meshparity_files::Limit {
        bytes: 64 << 20,
        what: "a replica digests file",
    };
    let text = meshparity_files::read_to_string(path, limit)?;
    let file: File = serde_json::from_str(&text)?;
    if file.version != 1 {
        return Err(DigestsError::Version(file.version));
    }
    if file.groups.is_empty() {
        return Err(DigestsError::NoGroups);
    }
    for g in &file.groups {
        let n = g.ranks.len();
        if n == 0 || g.digests.len() != n || g.norms.len() != n {
            return Err(DigestsError::Lengths {
                param: g.param.clone(),
                ranks: n,
                digests: g.digests.len(),
                norms: g.norms.len(),
            });
        }
        if let Some(i) = (1..n).find(|&i| g.digests[i] != g.digests[0]) {
            return Ok(Some(format!(
                "`{}`: replicas that must hold the same bytes differ: rank {} holds norm {}, rank {} norm {} (replica digests)",
                g.param, g.ranks[i], g.norms[i], g.ranks[0], g.norms[0]
            )));
        }
    }
    Ok(None)
}

/// A replica digests file that cannot be judged.
#[derive(Debug, thiserror::Error)]
pub enum DigestsError {
    #[error(transparent)]
    Read(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("version {0} (this meshparity reads 1)")]
    Version(u32),
    #[error("no groups: nothing was compared")]
    NoGroups,
    #[error("`{param}`: {ranks} ranks, {digests} digests, {norms} norms")]
    Lengths {
        param: String,
        ranks: usize,
        digests: usize,
        norms: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digests(json: &str) -> Result<Option<String>, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digests.json");
        std::fs::write(&path, json).unwrap();
        disagreement(&path).map_err(|e| e.to_string())
    }

    #[test]
    fn agreeing_groups_pass_and_a_drifted_replica_is_named() {
        let ok = r#"{"version": 1, "world_size": 2, "groups": [
            {"param": "norm.weight", "group": "norm.weight", "ranks": [0, 1],
             "digests": ["ab", "ab"], "norms": [1.0, 1.0]}]}"#;
        assert_eq!(digests(ok), Ok(None));
        let drift = ok.replace(r#"["ab", "ab"]"#, r#"["ab", "cd"]"#);
        let why = digests(&drift).unwrap().unwrap();
        assert!(
            why.contains("`norm.weight`") && why.contains("rank 1"),
            "{why}"
        );
    }

    /// A FIFO is refused at once (no writer ever comes), not waited on.
    #[test]
    fn a_fifo_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digests.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(disagreement(&path).is_err());
    }

    #[test]
    fn malformed_or_empty_digests_are_errors() {
        assert!(digests("{}").is_err());
        assert!(digests(r#"{"version": 1, "groups": []}"#).is_err());
        assert!(digests(r#"{"version": 2, "groups": []}"#).is_err());
        let short = r#"{"version": 1, "groups": [{"param": "w", "group": "w", "ranks": [0, 1],
            "digests": ["ab"], "norms": [1.0, 1.0]}]}"#;
        assert!(digests(short).unwrap_err().contains("`w`"));
    }
}
