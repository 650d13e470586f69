use super::*;
use crate::testing::training;
use meshparity_engine::optimizer::decay;
use meshparity_engine::optimizer::step::entries;

fn f32s(v: &[f32]) -> HostTensor {
    HostTensor {
        dtype: TensorDtype::F32,
        shape: vec![v.len()],
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// Update 2 of AdamW computed in f32 as an engine does it, deterministic pseudo-random values;
/// `wd_of` gives each parameter's decay (world size 1's groups, or a bug's).
fn step_file(t: &Training, wd_of: impl Fn(&str) -> f64) -> (Shards, Shards) {
    let (mut grads, mut before, mut after) = (Shards::new(), Shards::new(), Shards::new());
    for (k, name) in ["layers.0.mlp.up.weight", "norm.weight"].iter().enumerate() {
        let n = 64;
        let x = |i: usize, s: u32| ((i as f32 + 1.0) * (0.37 + s as f32 + k as f32)).sin();
        let w: Vec<f32> = (0..n)
            .map(|i| {
                if k == 1 {
                    1.0 + 0.1 * x(i, 0)
                } else {
                    0.02 * x(i, 0)
                }
            })
            .collect();
        let g: Vec<f32> = (0..n).map(|i| 1e-2 * x(i, 1)).collect();
        let m: Vec<f32> = (0..n).map(|i| 1e-3 * x(i, 2)).collect();
        let v: Vec<f32> = (0..n).map(|i| 1e-6 * (1.5 + x(i, 3))).collect();
        let lr = t.lr_at(1) as f32;
        let shrink = (1.0 - t.lr_at(1) * wd_of(name)) as f32;
        let (c1, c2) = (
            (1.0 - 0.9f64.powi(2)) as f32,
            (1.0 - 0.999f64.powi(2)) as f32,
        );
        let m2: Vec<f32> = m.iter().zip(&g).map(|(m, g)| m * 0.9 + g * 0.1).collect();
        let v2: Vec<f32> = v
            .iter()
            .zip(&g)
            .map(|(v, g)| v * 0.999 + g * g * 0.001)
            .collect();
        let w2: Vec<f32> = w
            .iter()
            .zip(&m2)
            .zip(&v2)
            .map(|((w, m), v)| w * shrink - (m / c1) / ((v / c2).sqrt() + 1e-8) * lr)
            .collect();
        grads.insert((*name).to_owned(), f32s(&g));
        before.insert((*name).to_owned(), f32s(&w));
        before.insert(format!("{EXP_AVG}{name}"), f32s(&m));
        before.insert(format!("{EXP_AVG_SQ}{name}"), f32s(&v));
        after.insert((*name).to_owned(), f32s(&w2));
        after.insert(format!("{EXP_AVG}{name}"), f32s(&m2));
        after.insert(format!("{EXP_AVG_SQ}{name}"), f32s(&v2));
    }
    let weights = after
        .iter()
        .filter(|(n, _)| grads.contains_key(*n))
        .map(|(n, t)| (n.clone(), t.clone()))
        .collect();
    (entries(2, &grads, &before, &after), weights)
}

/// The step file and the weights after it, as an engine writes them.
fn judged(t: &Training, (file, weights): &(Shards, Shards)) -> Result<Replayed, ReplayError> {
    let dir = tempfile::tempdir().unwrap();
    let (path, after) = (
        dir.path().join("step.safetensors"),
        dir.path().join("w.safetensors"),
    );
    checkpoint::save(&path, file).unwrap();
    checkpoint::save(&after, weights).unwrap();
    replay(&path, &after, t, DType::Bf16)
}

/// An f32 step with world size 1's decay groups is within a few units of round-off of the
/// replay; the same step decaying the exempt norm weight (a sharded optimizer's bug) is far
/// past the limit at the norm weight, and only there.
#[test]
fn a_correct_f32_step_passes_and_a_lost_decay_exemption_fails_where_it_acts() {
    let t = training(Optimizer::Adamw, Some(0.01));
    let ok = judged(&t, &step_file(&t, |n| decay(&t, n))).unwrap();
    assert_eq!(ok.step, 2);
    assert_eq!(ok.readings.len(), 6);
    assert!(
        ok.readings.iter().all(|(_, v)| *v < 2.0),
        "{:#?}",
        ok.readings
    );
    let bug = judged(&t, &step_file(&t, |_| 0.01)).unwrap();
    let failed: Vec<_> = bug.readings.iter().filter(|(_, v)| *v > LIMIT).collect();
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert_eq!(failed[0].0, "norm.weight");
    // lr·wd of a weight near 1 in units of f32's round-off: 1e-5 / 1.2e-7.
    assert!(failed[0].1 > 50.0, "{}", failed[0].1);
    for (subject, site) in [
        ("optim.exp_avg_sq.norm.weight", "adam.norm.weight.v"),
        ("optim.exp_avg.norm.weight", "adam.norm.weight.m"),
        ("norm.weight", "param.norm.weight"),
    ] {
        assert_eq!(site_of(subject), site);
        assert_eq!(param_of_site(site), "norm.weight");
    }
}

/// The step must be the oracle's last, and every parameter's weights must be there.
#[test]
fn a_step_file_that_is_not_the_oracles_last_or_is_incomplete_is_an_error() {
    let t = training(Optimizer::Adamw, None);
    let mut file = step_file(&t, |n| decay(&t, n));
    let late = Training {
        oracle_steps: 3,
        ..t.clone()
    };
    let e = judged(&late, &file).unwrap_err().to_string();
    assert!(e.contains("update 2; the oracle level's last is 3"), "{e}");
    file.1.shift_remove("norm.weight");
    let e = judged(&t, &file).unwrap_err().to_string();
    assert!(e.contains("`after.norm.weight` is missing"), "{e}");
    // A moment shorter than its gradient is refused, not compared on its prefix.
    let mut short = step_file(&t, |n| decay(&t, n));
    let m = short.0.get_mut("after.optim.exp_avg.norm.weight").unwrap();
    m.bytes.truncate(m.bytes.len() / 2);
    m.shape = vec![m.shape[0] / 2];
    let e = judged(&t, &short).unwrap_err().to_string();
    assert!(
        e.contains("64 gradient elements against [64, 64, 64, 64, 32, 64]"),
        "{e}"
    );
    file.0.shift_remove("before.optim.exp_avg.norm.weight");
    file.1 = step_file(&t, |n| decay(&t, n)).1;
    let e = judged(&t, &file).unwrap_err().to_string();
    assert!(e.contains("moments"), "{e}");
}
