//! The routing a reference recorded for mesh runs to replay (`routing-replay.safetensors`): for
//! every step and layer, each token's top-k experts and, under a capacity factor, which slots
//! their experts kept — so round-off tie flips cannot change which experts a token reaches or
//! which slots are dropped, while the routing level still compares the mesh's own top-k.

use std::path::Path;

use indexmap::IndexMap;
use meshparity_compare::InputError;

use crate::checkpoint;
use crate::routing::{int_tensor, ints};
use crate::HostTensor;

/// One layer's routing of a step's global batch, as mesh runs replay it: each token's top-k
/// experts (row-major [B·S], best first) and, under a capacity factor, which of each token's
/// slots its expert kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decided {
    pub choices: Vec<Vec<usize>>,
    pub kept: Option<Vec<Vec<bool>>>,
}

/// The replay artifact (`routing-replay.safetensors`): `step{S}.layers.{N}` [B·S, k] i64 expert
/// ids, and `step{S}.layers.{N}.kept` [B·S, k] i64 (1 kept, 0 dropped) where capacity applies.
pub fn replay_artifact(steps: &[Vec<Decided>]) -> IndexMap<String, HostTensor> {
    let mut out = IndexMap::new();
    for (s, layers) in steps.iter().enumerate() {
        for (l, d) in layers.iter().enumerate() {
            let k = d.choices.first().map_or(0, Vec::len);
            let ids: Vec<i64> = d.choices.iter().flatten().map(|&e| e as i64).collect();
            let shape = vec![d.choices.len(), k];
            out.insert(
                format!("step{s}.layers.{l}"),
                int_tensor(&ids, shape.clone()),
            );
            if let Some(kept) = &d.kept {
                let flags: Vec<i64> = kept.iter().flatten().map(|&x| i64::from(x)).collect();
                out.insert(
                    format!("step{s}.layers.{l}.kept"),
                    int_tensor(&flags, shape),
                );
            }
        }
    }
    out
}

/// Read a replay artifact back (see [`replay_artifact`]).
pub fn read_replay(path: &Path) -> Result<Vec<Vec<Decided>>, InputError> {
    let t = checkpoint::load(path)?;
    let rows = |name: &str, ids: &HostTensor| -> Result<Vec<Vec<i64>>, InputError> {
        let k = *ids.shape.last().unwrap_or(&1);
        Ok(ints(path, name, ids)?
            .chunks(k.max(1))
            .map(<[i64]>::to_vec)
            .collect())
    };
    let mut steps = Vec::new();
    for s in 0.. {
        let mut layers = Vec::new();
        loop {
            let name = format!("step{s}.layers.{}", layers.len());
            let Some(ids) = t.get(&name) else { break };
            let choices = rows(&name, ids)?
                .into_iter()
                .map(|c| c.into_iter().map(|e| e.max(0) as usize).collect())
                .collect::<Vec<Vec<usize>>>();
            let kept_name = format!("{name}.kept");
            let kept = match t.get(&kept_name) {
                Some(k) => {
                    let flags = rows(&kept_name, k)?;
                    if flags.len() != choices.len() {
                        return Err(InputError::Other {
                            path: path.to_path_buf(),
                            reason: format!(
                                "`{kept_name}` has {} tokens, `{name}` {}",
                                flags.len(),
                                choices.len()
                            ),
                        });
                    }
                    Some(
                        flags
                            .into_iter()
                            .map(|f| f.into_iter().map(|x| x != 0).collect())
                            .collect(),
                    )
                }
                None => None,
            };
            layers.push(Decided { choices, kept });
        }
        if layers.is_empty() {
            break;
        }
        steps.push(layers);
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_round_trips_with_and_without_kept_slots() {
        let dir = tempfile::tempdir().unwrap();
        let dropless = Decided {
            choices: vec![vec![0, 1], vec![2, 3]],
            kept: None,
        };
        let capped = Decided {
            choices: vec![vec![1, 0], vec![3, 2]],
            kept: Some(vec![vec![true, false], vec![true, true]]),
        };
        let steps = vec![vec![dropless, capped.clone()], vec![capped.clone(), capped]];
        let path = dir.path().join("replay.safetensors");
        checkpoint::save(&path, &replay_artifact(&steps)).unwrap();
        assert_eq!(read_replay(&path).unwrap(), steps);
        // A kept mask that does not cover the tokens is an error naming it.
        let mut t = checkpoint::load(&path).unwrap();
        let kept = t.get_mut("step1.layers.0.kept").unwrap();
        kept.shape = vec![1, 2];
        kept.bytes.truncate(16);
        checkpoint::save(&path, &t).unwrap();
        let err = read_replay(&path).unwrap_err().to_string();
        assert!(err.contains("`step1.layers.0.kept` has 1 tokens"), "{err}");
    }
}
