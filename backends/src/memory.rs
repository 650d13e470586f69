//! How much host memory a burn engine run needs, estimated from the spec before anything runs.
//!
//! The burn engine simulates every rank of a mesh in one process, so a model that fits a
//! single device can still exhaust the machine on a dp4 mesh; without an estimate the worker
//! dies in an allocation failure (an abort, no message) minutes into the run. The estimate is
//! deliberately simple and generous; it is compared with the machine's memory (or its cgroup
//! limit) and the cell refused with the numbers when it cannot fit.

use meshparity_specs::{DType, Field, MeshConfig, ModelConfig, Training, Unsupported};

use crate::llama::params;

/// Bytes per parameter per data-parallel replica: f32 weights, gradients and the two AdamW
/// moments, the half-precision working copy, the seed copy kept for weight updates.
const STATE_BYTES: f64 = 4.0 + 4.0 + 8.0 + 2.0 + 4.0;

/// Autodiff graphs, temporaries and allocator slack on top of what the tensors hold. Measured
/// peak RSS of a mesh run over the tensor estimate (dp2/tp2/dp4; hidden 64–1024, vocab
/// 128–16384, seq 16–512): 0.88–1.20, from 22 MB to 4.4 GB; 1.5 leaves room.
const OVERHEAD: f64 = 1.5;

/// What a run of `model` on `mesh` (the world-size-1 reference when `None`) needs, in bytes.
pub fn estimate(model: &ModelConfig, mesh: Option<&MeshConfig>, training: &Training) -> f64 {
    let params: f64 = params::specs(model)
        .iter()
        .map(|p| p.shape.iter().map(|&d| d as f64).product::<f64>())
        .sum();
    let (dp, tp, sp) = mesh.map_or((1.0, 1.0, false), |m| (m.dp as f64, m.tp as f64, m.sp));
    let (h, f, v) = (model.hidden as f64, model.ffn as f64, model.vocab as f64);
    // The MTP layer is one layer more, and a second head's logits.
    let mtp = f64::from(u8::from(model.mtp()));
    let (layers, heads, seq) = (
        model.layers as f64 + mtp,
        model.heads as f64,
        model.seq_len as f64,
    );
    let tokens = training.batch as f64 * seq;
    // Per token and layer: the residual stream, norms, q/k/v/o and the MLP's three
    // projections, each kept for backward; per token once: logits, softmax and their gradient.
    let per_token = layers * (12.0 * h + 4.0 * f) + 3.0 * v * (1.0 + mtp);
    let scores = training.batch as f64 * heads * seq * seq * layers * 2.0;
    // Without sequence parallelism every tensor-parallel rank holds the full activations.
    let replicated = if sp { 1.0 } else { tp };
    let activations = 4.0 * (tokens * per_token + scores) * replicated;
    OVERHEAD * (params * STATE_BYTES * dp + activations)
}

/// The memory this process may use, and what bounds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Room {
    pub bytes: f64,
    /// How the refusal says it: `this machine has`, `its cgroup allows`, …
    pub by: &'static str,
}

/// The memory this process may use: the machine's, or its cgroup's limit or the room left under
/// its address-space limit when lower.
pub fn available() -> Option<Room> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let total = total_kib * 1024.0;
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok());
    let machine = Room {
        bytes: total,
        by: "this machine has",
    };
    let limits = [
        cgroup.map(|bytes| Room {
            bytes,
            by: "its cgroup allows",
        }),
        address_space_left().map(|bytes| Room {
            bytes,
            by: "its address-space limit (ulimit -v) leaves this process",
        }),
    ];
    Some(
        limits
            .into_iter()
            .flatten()
            .fold(machine, |a, b| if b.bytes < a.bytes { b } else { a }),
    )
}

/// The room left under this process's address-space limit (`ulimit -v`, RLIMIT_AS), where one
/// is set: what is mapped now (the binary, thread stacks, the allocator's reserve) counts
/// against it, and an allocation past it fails whatever the machine has free. An estimate that
/// ignored it admitted cells whose workers then aborted.
fn address_space_left() -> Option<f64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let mapped_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    Some((limit.rlim_cur as f64 - mapped_kib * 1024.0).max(0.0))
}

/// Refuse a cell whose estimate is more than the memory there is.
pub fn fits(
    model: &ModelConfig,
    mesh: Option<&MeshConfig>,
    _dtype: DType,
    training: &Training,
    room: Room,
) -> Result<(), Unsupported> {
    let needed = estimate(model, mesh, training);
    if needed <= room.bytes {
        return Ok(());
    }
    let gib = |b: f64| b / (1u64 << 30) as f64;
    let ranks = mesh.map_or(1, |m| m.dp * m.tp * m.pp * m.cp);
    Err(Unsupported::new(
        Field::Model,
        format!(
            "needs about {:.1} GiB of memory for its {ranks} simulated rank(s) (estimated from \
             the model's sizes, the batch and the mesh), {} {:.1} GiB",
            gib(needed),
            room.by,
            gib(room.bytes)
        ),
    )
    .help(
        "make the model smaller (hidden, layers, vocab, seq_len), lower [run] batch, use a mesh \
         with fewer data-parallel replicas, or run it on a machine with more memory",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama(hidden: u32, vocab: u32) -> ModelConfig {
        ModelConfig {
            family: meshparity_specs::Family::Llama,
            layers: 4,
            hidden,
            heads: 8,
            kv_heads: 8,
            ffn: hidden * 3,
            vocab,
            seq_len: 128,
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

    fn training() -> Training {
        Training {
            seed: 1,
            steps: 4,
            oracle_steps: 2,
            batch: 8,
            optimizer: meshparity_specs::Optimizer::Adamw,
            lr: 1e-3,
            ..Training::default()
        }
    }

    fn dp(n: u32) -> MeshConfig {
        MeshConfig {
            dp: n,
            schedule: meshparity_specs::Schedule::GPipe,
            ..MeshConfig::DEFAULT
        }
    }

    #[test]
    fn the_estimate_grows_with_size_and_replicas_and_refuses_what_cannot_fit() {
        let training = training();
        let small = estimate(&llama(64, 256), None, &training);
        let big = estimate(&llama(4096, 128_000), None, &training);
        assert!(small < 200e6, "{small}");
        assert!(big > 10e9, "{big}");
        let dp4 = dp(4);
        assert!(estimate(&llama(512, 4096), Some(&dp4), &training) > 3.0 * small);
        let room = Room {
            bytes: 24e9,
            by: "this machine has",
        };
        let err = fits(&llama(4096, 128_000), None, DType::F32, &training, room).unwrap_err();
        assert!(err.message.contains("needs about"), "{err}");
        fits(&llama(512, 4096), Some(&dp4), DType::F32, &training, room).unwrap();
    }
}
