//! The routing level's tests: evidence, the microbatch budget, malformed artifacts.
use super::*;
use meshparity_compare::TensorDtype;
use meshparity_engine::routing::artifact;

use std::path::PathBuf;

fn write(dir: &Path, name: &str, choices: Vec<Vec<usize>>, scores: Vec<f64>) -> PathBuf {
    let real = [true, true, true, false, true, true, false, false];
    let path = dir.join(name);
    checkpoint::save(&path, &artifact(&[(choices, scores)], &real, 2, None)).unwrap();
    path
}

#[test]
fn mismatches_are_counted_on_real_tokens_with_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let c: Vec<Vec<usize>> = (0..8).map(|t| vec![t % 4, (t + 1) % 4]).collect();
    let s: Vec<f64> = (0..32).map(|i| i as f64 / 32.0).collect();
    let a = write(dir.path(), "a.safetensors", c.clone(), s.clone());
    let mut d = c.clone();
    d[5] = vec![3, 0]; // row 1, position 1: a real token
    d[3] = vec![0, 0]; // padding: not checked
    d[0] = vec![1, 0]; // the same set, best first swapped: not a mismatch
    let b = write(dir.path(), "b.safetensors", d, s);
    let r = compare(&a, &b, 0.0).unwrap();
    assert_eq!((r.tokens, r.checked, r.mismatches), (5, 5, 1));
    assert_eq!((r.first[0].row, r.first[0].position), (1, 1));
    assert!((r.overlap - 0.8).abs() < 1e-12, "{}", r.overlap);
    let limits = |m: f64| {
        let mut l = Limits::default();
        l.metrics.insert("mismatch", m);
        l
    };
    let limits_low = limits(0.1);
    let c = r.comparison(&limits_low, &a, &b);
    assert!(!c.passed);
    assert!(c.failure.unwrap().contains("row 1 position 1"));
    assert!(r.comparison(&limits(0.25), &a, &b).passed);
    // Every token a near-tie: reported, none gated, and nothing checked is a failure.
    let r = compare(&a, &b, 1.0).unwrap();
    assert_eq!((r.checked, r.near_ties, r.near_tie_mismatches), (0, 5, 1));
    assert!(!r.comparison(&limits(0.25), &a, &b).passed);
}

/// One microbatch routed badly cannot hide in the run's average: each microbatch is held to
/// the threshold, within the failing-microbatch budget.
#[test]
fn the_failing_microbatch_budget_holds_each_microbatch_to_the_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let c: Vec<Vec<usize>> = (0..8).map(|t| vec![t % 4, (t + 1) % 4]).collect();
    let s: Vec<f64> = (0..32).map(|i| i as f64 / 32.0).collect();
    let a = write(dir.path(), "a.safetensors", c.clone(), s.clone());
    let mut d = c;
    d[5] = vec![3, 0]; // row 1 (microbatch 1): 1 of its 2 real tokens
    let real = [true, true, true, false, true, true, false, false];
    let b = dir.path().join("b.safetensors");
    let art = artifact(&[(d, s)], &real, 2, Some(&[0, 1]));
    checkpoint::save(&b, &art).unwrap();
    let r = compare(&a, &b, 0.0).unwrap();
    let per: Vec<(usize, usize)> = r
        .microbatches
        .iter()
        .map(|m| (m.checked, m.mismatches))
        .collect();
    assert_eq!(per, vec![(3, 0), (2, 1)]);
    let limits = |budget: Option<f64>| {
        let mut l = Limits::default();
        l.metrics.insert("mismatch", 0.25);
        if let Some(b) = budget {
            l.metrics.insert("failing_microbatches", b);
        }
        l
    };
    // 1 of 5 overall (20% ≤ 25%), but microbatch 1 at 50%.
    let c = r.comparison(&limits(None), &a, &b);
    assert!(!c.passed);
    assert!(c.failure.unwrap().contains("1 of 2 microbatches"));
    assert!(r.comparison(&limits(Some(1.0)), &a, &b).passed);
    // A microbatch index per row, or an error naming the tensor.
    let bad = artifact(&[(c_of(), vec![0.0; 32])], &real, 2, Some(&[0]));
    checkpoint::save(&b, &bad).unwrap();
    let err = compare(&a, &b, 0.0).unwrap_err().to_string();
    assert!(err.contains("`microbatch` holds 1 entries"), "{err}");
}

fn c_of() -> Vec<Vec<usize>> {
    (0..8).map(|t| vec![t % 4, (t + 1) % 4]).collect()
}

/// A program writing i32 ids, or no experts per token, hears which tensor is wrong.
#[test]
fn malformed_artifacts_are_errors_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let c: Vec<Vec<usize>> = (0..8).map(|t| vec![t % 4, (t + 1) % 4]).collect();
    let s: Vec<f64> = (0..32).map(|i| i as f64 / 32.0).collect();
    let a = write(dir.path(), "a.safetensors", c, s);
    let mut t = checkpoint::load(&a).unwrap();
    let ids = t.get_mut("layers.0.experts").unwrap();
    ids.dtype = TensorDtype::I32;
    ids.bytes.truncate(ids.bytes.len() / 2);
    let b = dir.path().join("b.safetensors");
    checkpoint::save(&b, &t).unwrap();
    let err = compare(&a, &b, 0.0).unwrap_err().to_string();
    assert!(
        err.contains("`layers.0.experts` is I32; it must be i64"),
        "{err}"
    );
    let ids = t.get_mut("layers.0.experts").unwrap();
    ids.dtype = TensorDtype::I64;
    ids.shape = vec![8, 0];
    ids.bytes.clear();
    checkpoint::save(&b, &t).unwrap();
    let err = compare(&a, &b, 0.0).unwrap_err().to_string();
    assert!(err.contains("0 choices"), "{err}");
}
