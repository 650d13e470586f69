//! One step smaller along each axis of a case, most shrinking first: parallel degrees down (to
//! 1, or halved), then depth, steps, batch and widths halved, then f32 for a 16-bit dtype.
//! Candidates the spec language refuses are dropped by the caller's validation, so a step here
//! need only be plausible.

use meshparity_specs::{DType, MeshConfig};

use super::Case;

/// Every one-step-smaller case.
pub fn smaller(c: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    mesh_steps(c, &mut out);
    let with = |f: &dyn Fn(&mut Case)| {
        let mut n = c.clone();
        f(&mut n);
        n
    };
    let m = &c.model;
    if m.layers > 1 {
        out.push(with(&|n| n.model.layers = 1));
        out.push(with(&|n| n.model.layers = m.layers / 2));
    }
    let t = &c.training;
    if t.steps > 1 {
        for steps in [1, t.steps / 2] {
            out.push(with(&|n| {
                n.training.steps = steps;
                n.training.oracle_steps = n.training.oracle_steps.min(steps);
            }));
        }
    }
    for (now, set) in [
        (
            t.batch,
            (|n: &mut Case, v| n.training.batch = v) as fn(&mut Case, u32),
        ),
        (m.seq_len, |n, v| n.model.seq_len = v),
        (m.vocab, |n, v| n.model.vocab = v),
        (m.ffn, |n, v| n.model.ffn = v),
        (m.hidden, |n, v| n.model.hidden = v),
        (m.heads, |n, v| {
            n.model.heads = v;
            n.model.kv_heads = n.model.kv_heads.min(v);
        }),
        (m.kv_heads, |n, v| n.model.kv_heads = v),
    ] {
        if now > 1 && now % 2 == 0 {
            out.push(with(&|n| set(n, now / 2)));
        }
    }
    if let Some(e) = m.experts.filter(|e| *e > 2 && e % 2 == 0) {
        out.push(with(&|n| n.model.experts = Some(e / 2)));
    }
    if matches!(c.dtype, DType::Bf16 | DType::F16) {
        out.push(with(&|n| n.dtype = DType::F32));
    }
    out.retain(|n| n != c);
    out
}

/// The mesh's axes to 1 (the one that fails alone remains), then halved.
fn mesh_steps(c: &Case, out: &mut Vec<Case>) {
    type Axis = (fn(&MeshConfig) -> u32, fn(&mut MeshConfig, u32));
    let axes: [Axis; 7] = [
        (|m| m.pp, |m, v| m.pp = v),
        (|m| m.cp, |m, v| m.cp = v),
        (|m| m.ep, |m, v| m.ep = v),
        (|m| m.etp, |m, v| m.etp = v),
        (|m| m.dp, |m, v| m.dp = v),
        (|m| m.tp, |m, v| m.tp = v),
        (|m| m.microbatches, |m, v| m.microbatches = v),
    ];
    for (get, set) in axes {
        let now = get(&c.mesh);
        for to in [1, now / 2] {
            if now > 1 && to >= 1 && to < now {
                let mut n = c.clone();
                set(&mut n.mesh, to);
                if n.mesh.tp == 1 {
                    n.mesh.sp = false;
                }
                if n.mesh.dp * n.mesh.cp == 1 {
                    n.mesh.zero = 0;
                    n.mesh.shard = 0;
                }
                out.push(n);
            }
        }
    }
    if c.mesh.zero > 0 {
        let mut n = c.clone();
        n.mesh.zero = 0;
        n.mesh.shard = 0;
        out.push(n);
    }
}
