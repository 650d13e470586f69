//! The single-device `llama` model, the oracle of every check: deterministic, causal, blind to
//! padding, and with gradients that match finite differences.

use burn::tensor::{DType, Device, Tensor};
use meshparity_backends::data::Batch;
use meshparity_backends::llama::{forward, Params};
use meshparity_specs::{Family, ModelConfig};

fn tiny() -> ModelConfig {
    ModelConfig {
        family: Family::Llama,
        layers: 2,
        hidden: 16,
        heads: 4,
        kv_heads: 2,
        ffn: 24,
        vocab: 32,
        seq_len: 8,
        experts: None,
        top_k: None,
        routing_replay: None,
        moe: Default::default(),
        tie_embeddings: None,
        mtp_layers: None,
        engine: None,
        params: Vec::new(),
    }
}

fn values(t: &Tensor<3>) -> Vec<f64> {
    t.to_data().convert::<f64>().try_to_vec::<f64>().unwrap()
}

fn scalar(t: Tensor<1>) -> f64 {
    t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()[0]
}

#[test]
fn forward_is_bit_deterministic() {
    let c = tiny();
    let dev = Device::flex();
    let batch = Batch::synthetic(3, 0, (4, c.seq_len as usize, c.vocab as usize), None);
    let run = || {
        let p = Params::init(&c, 3, &dev, DType::F32);
        forward(&c, &p, &batch, &dev)
            .logits
            .to_data()
            .as_bytes()
            .to_vec()
    };
    assert_eq!(run(), run());
}

#[test]
fn logits_ignore_future_tokens_and_padding() {
    let c = tiny();
    let dev = Device::flex();
    let p = Params::init(&c, 5, &dev, DType::F64);
    let s = c.seq_len as usize;
    let mut batch = Batch::synthetic(5, 0, (2, s, c.vocab as usize), None);
    batch.lengths = vec![s, 5];
    let base = values(&forward(&c, &p, &batch, &dev).logits);
    let v = c.vocab as usize;
    // Change token 4 of sequence 0: positions 0..4 must not move, position 4 must.
    let mut future = batch.clone();
    future.tokens[4] = (future.tokens[4] + 1) % c.vocab as i64;
    let changed = values(&forward(&c, &p, &future, &dev).logits);
    assert_eq!(
        base[..4 * v],
        changed[..4 * v],
        "earlier positions saw a later token"
    );
    assert_ne!(base[4 * v..5 * v], changed[4 * v..5 * v]);
    // Change the padding of sequence 1 (positions 5..): its real positions must not move.
    let mut padded = batch.clone();
    for t in &mut padded.tokens[s + 5..2 * s] {
        *t = 7;
    }
    let changed = values(&forward(&c, &p, &padded, &dev).logits);
    assert_eq!(
        base[s * v..(s + 5) * v],
        changed[s * v..(s + 5) * v],
        "real tokens attended to padding"
    );
}

#[test]
fn gradients_match_finite_differences() {
    finite_differences(tiny(), 9);
}

/// The moe family: cross-entropy plus the load-balance and z-losses, through router, top-k
/// renormalization and token dispatch (routing itself is piecewise constant: a 1e-6 step does
/// not flip it).
#[test]
fn moe_gradients_match_finite_differences() {
    let c = ModelConfig {
        family: Family::Moe,
        experts: Some(4),
        top_k: Some(2),
        ..tiny()
    };
    finite_differences(c, 6 + 1 + 4 * 3);
}

fn objective(c: &ModelConfig, p: &Params, batch: &Batch, dev: &Device) -> Tensor<1> {
    let f = forward(c, p, batch, dev);
    let ce = f.loss_sum / batch.counted() as f64;
    match f.aux {
        Some(aux) => {
            assert!(scalar(aux.load_balance.clone().inner()) > 0.0);
            ce + aux.load_balance + aux.z
        }
        None => ce,
    }
}

/// Autodiff against central differences at three elements of every parameter;
/// `per_layer` parameters in each layer.
fn finite_differences(c: ModelConfig, per_layer: usize) {
    let dev = Device::flex();
    let ad = dev.clone().autodiff();
    let batch = Batch::synthetic(9, 0, (3, c.seq_len as usize, c.vocab as usize), None);
    let p = Params::init(&c, 9, &dev, DType::F64);
    let leaves = p.require_grad();
    let loss = objective(&c, &leaves, &batch, &ad);
    let grads = loss.backward();
    let loss_at = |p: &Params| scalar(objective(&c, p, &batch, &dev));
    let eps = 1e-6;
    let mut checked = 0;
    for (name, leaf) in &leaves.tensors {
        let g = leaf
            .grad(&grads)
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        let g: Vec<f64> = g.to_data().convert::<f64>().try_to_vec::<f64>().unwrap();
        let w = p.tensors[name].clone();
        let [rows, cols] = w.dims();
        let n = rows * cols;
        for &i in &[0, n / 2, n - 1] {
            let flat: Vec<f64> = w.to_data().convert::<f64>().try_to_vec::<f64>().unwrap();
            let shifted = |delta: f64| {
                let mut v = flat.clone();
                v[i] += delta;
                let mut q = p.clone();
                q.tensors.insert(
                    name.clone(),
                    Tensor::<2>::from_data(
                        burn::tensor::TensorData::new(v, [rows, cols]),
                        (&dev, DType::F64),
                    ),
                );
                loss_at(&q)
            };
            let numeric = (shifted(eps) - shifted(-eps)) / (2.0 * eps);
            let err = (numeric - g[i]).abs() / numeric.abs().max(g[i].abs()).max(1e-7);
            assert!(
                err < 1e-5,
                "{name}[{i}]: autodiff {} vs finite difference {numeric} (rel {err:.2e})",
                g[i]
            );
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        3 * (1 + per_layer * c.layers as usize + 2),
        "every parameter was checked"
    );
}

/// Label smoothing ε and z-loss w: the loss is Σ over counted tokens of −(1 − ε)·log p_label −
/// ε/V · Σ_j log p_j (torch's `label_smoothing`) + w·(log Σ_j exp z_j)² (PaLM's z-loss),
/// computed here from the logits by hand in f64; ε = w = 0 is the plain cross-entropy, and
/// padding counts for nothing either way.
#[test]
fn label_smoothing_and_z_loss_are_torchs_and_palms() {
    use meshparity_backends::llama::{forward_with, LossTerms};
    let c = tiny();
    let dev = Device::flex();
    let p = Params::init(&c, 9, &dev, DType::F64);
    let (s, v) = (c.seq_len as usize, c.vocab as usize);
    let mut batch = Batch::synthetic(9, 0, (2, s, v), None);
    batch.lengths = vec![s, 5];
    batch.targets[s + 5..].fill(meshparity_backends::data::IGNORE);
    for (eps, w) in [(0.0, 0.0), (0.1, 0.0), (0.3, 0.0), (0.0, 1e-2), (0.1, 1e-4)] {
        let terms = LossTerms {
            label_smoothing: eps,
            z_loss: w,
        };
        let f = forward_with(&c, &p, &batch, &dev, terms, None);
        let logits = values(&f.logits);
        let mut want = 0.0;
        for (t, &label) in batch.targets.iter().enumerate() {
            if label == meshparity_backends::data::IGNORE {
                continue;
            }
            let z = &logits[t * v..(t + 1) * v];
            let max = z.iter().cloned().fold(f64::MIN, f64::max);
            let lse = max + z.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
            let logp = |j: usize| z[j] - lse;
            let uniform: f64 = (0..v).map(logp).sum::<f64>() / v as f64;
            want -= (1.0 - eps) * logp(label as usize) + eps * uniform;
            want += w * lse * lse;
        }
        let got = scalar(f.loss_sum);
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "ε {eps}, w {w}: {got} vs {want}"
        );
        if eps > 0.0 || w > 0.0 {
            let plain = scalar(forward(&c, &p, &batch, &dev).loss_sum);
            assert!(
                (got - plain).abs() > 1e-3 * plain,
                "ε {eps}, w {w} changed nothing"
            );
        }
    }
}
