//! The parameters of a `llama` model: names, shapes, deterministic init.
//!
//! Names follow the checkpoint layout every sharding plan maps from. Matrices are stored
//! `[in, out]` so a layer is `x · W`; column-parallel layers split dim 1, row-parallel dim 0.

use burn::tensor::{DType, Device, Tensor, TensorData};
use indexmap::IndexMap;
use meshparity_specs::ModelConfig;

use crate::rng;

/// A parameter's name and logical shape (norm weights are vectors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
}

/// Every parameter of the model, in checkpoint order.
pub fn specs(c: &ModelConfig) -> Vec<ParamSpec> {
    let (h, v) = (c.hidden as usize, c.vocab as usize);
    let p = |name: String, shape: &[usize]| ParamSpec {
        name,
        shape: shape.to_vec(),
    };
    let mut out = vec![p("embed.weight".into(), &[v, h])];
    for l in 0..c.layers {
        out.extend(layer(c, l));
    }
    out.push(p("norm.weight".into(), &[h]));
    if !c.tied() {
        out.push(p("output.weight".into(), &[h, v]));
    }
    if c.mtp() {
        // DeepSeek-V3's MTP module (Megatron's names): the embedding's and the hidden state's
        // norms, the projection of their concatenation [2H → H], its transformer layer — the
        // layer after the model's last, [`mtp_layer`] — and its final norm. The embedding
        // and the output head are the model's.
        out.push(p("mtp.enorm.weight".into(), &[h]));
        out.push(p("mtp.hnorm.weight".into(), &[h]));
        out.push(p("mtp.eh_proj.weight".into(), &[2 * h, h]));
        out.extend(layer(c, mtp_layer(c)));
        out.push(p("mtp.norm.weight".into(), &[h]));
    }
    out
}

/// The index of the MTP module's transformer layer: the one after the model's last, so its
/// parameters, sites, dropout streams and faults are a layer's (`layers.{L}.*` for a model of
/// L layers), on the last pipeline stage.
pub fn mtp_layer(c: &ModelConfig) -> u32 {
    c.layers
}

/// Layer `l`'s parameters.
fn layer(c: &ModelConfig, l: u32) -> Vec<ParamSpec> {
    let (h, f) = (c.hidden as usize, c.ffn as usize);
    let hd = h / c.heads as usize;
    let (q, kv) = (c.heads as usize * hd, c.kv_heads as usize * hd);
    let p = |name: String, shape: &[usize]| ParamSpec {
        name,
        shape: shape.to_vec(),
    };
    let mut out = Vec::new();
    let n = |s: &str| format!("layers.{l}.{s}");
    out.push(p(n("attn_norm.weight"), &[h]));
    out.push(p(n("attn.q.weight"), &[h, q]));
    out.push(p(n("attn.k.weight"), &[h, kv]));
    out.push(p(n("attn.v.weight"), &[h, kv]));
    out.push(p(n("attn.o.weight"), &[q, h]));
    out.push(p(n("mlp_norm.weight"), &[h]));
    match c.experts.filter(|_| c.family.has_experts()) {
        Some(experts) => {
            out.push(p(n("mlp.router.weight"), &[h, experts as usize]));
            if c.moe.expert_bias() {
                out.push(p(n("mlp.router.expert_bias"), &[experts as usize]));
            }
            if let Some(fs) = c.moe.shared_expert_ffn.map(|f| f as usize) {
                out.push(p(n("mlp.shared_expert.gate.weight"), &[h, fs]));
                out.push(p(n("mlp.shared_expert.up.weight"), &[h, fs]));
                out.push(p(n("mlp.shared_expert.down.weight"), &[fs, h]));
            }
            for e in 0..experts {
                out.push(p(n(&format!("mlp.experts.{e}.gate.weight")), &[h, f]));
                out.push(p(n(&format!("mlp.experts.{e}.up.weight")), &[h, f]));
                out.push(p(n(&format!("mlp.experts.{e}.down.weight")), &[f, h]));
            }
        }
        None => {
            out.push(p(n("mlp.gate.weight"), &[h, f]));
            out.push(p(n("mlp.up.weight"), &[h, f]));
            out.push(p(n("mlp.down.weight"), &[f, h]));
        }
    }
    out
}

/// Whether a parameter is a buffer: state the model keeps and checkpoints but no gradient or
/// optimizer touches (the router's score-correction bias, updated by its own rule).
pub fn is_buffer(name: &str) -> bool {
    name.ends_with(".expert_bias")
}

/// Parameters as tensors. Vectors are held as `[1, n]` so every parameter is a `Tensor<2>`.
#[derive(Clone, Debug)]
pub struct Params {
    pub tensors: IndexMap<String, Tensor<2>>,
}

impl Params {
    pub fn get(&self, name: &str) -> Tensor<2> {
        self.tensors
            .get(name)
            .unwrap_or_else(|| panic!("parameter `{name}` is missing: params come from `specs`"))
            .clone()
    }

    /// Initial values: norms near one (not exactly, so norm-gradient bugs change numbers),
    /// matrices uniform with variance ~1/fan_in.
    pub fn init(c: &ModelConfig, seed: u64, device: &Device, dtype: DType) -> Self {
        let tensors = specs(c)
            .into_iter()
            .map(|s| {
                let n: usize = s.shape.iter().product();
                let values: Vec<f64> = if is_buffer(&s.name) {
                    vec![0.0; n]
                } else if s.shape.len() == 1 {
                    rng::uniform(seed, &s.name, n, 0.1)
                        .into_iter()
                        .map(|x| 1.0 + x)
                        .collect()
                } else {
                    let scale = (3.0 / s.shape[0] as f64).sqrt();
                    rng::uniform(seed, &s.name, n, scale)
                };
                let t = from_f64(values, &s.shape, device, dtype);
                (s.name, t)
            })
            .collect();
        Self { tensors }
    }

    /// Gradient-tracking copies (autodiff leaves).
    pub fn require_grad(&self) -> Self {
        Self {
            tensors: self
                .tensors
                .iter()
                .map(|(n, t)| (n.clone(), t.clone().autodiff().require_grad()))
                .collect(),
        }
    }
}

/// A tensor from f64 values and a logical shape (vectors become `[1, n]`).
pub fn from_f64(values: Vec<f64>, shape: &[usize], device: &Device, dtype: DType) -> Tensor<2> {
    let shape2 = if shape.len() == 1 {
        [1, shape[0]]
    } else {
        [shape[0], shape[1]]
    };
    Tensor::<2>::from_data(TensorData::new(values, shape2), (device, dtype))
}
