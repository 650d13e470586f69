//! One step smaller along each axis of a case, most shrinking first: parallel degrees down (to
//! 1, or halved), then depth, steps, batch and widths halved, then f32 for a 16-bit dtype.
//! Candidates the spec language refuses are dropped by the caller's validation, so a step here
//! need only be plausible.

use meshparity_specs::{DType, Schedule};

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
    // The order they are tried in: the axes least often the cause first.
    const AXES: [&str; 7] = ["pp", "cp", "ep", "etp", "dp", "tp", "microbatches"];
    for axis in AXES {
        let now = c.mesh.count(axis).expect("a count axis");
        for to in [1, now / 2] {
            if now > 1 && to >= 1 && to < now {
                let mut n = c.clone();
                n.mesh.set_count(axis, to);
                if n.mesh.tp == 1 {
                    n.mesh.sp = false;
                }
                if n.mesh.dp * n.mesh.cp == 1 {
                    n.mesh.zero = 0;
                    n.mesh.shard = 0;
                }
                if n.mesh.pp == 1 {
                    n.mesh.schedule = Schedule::OneFOneB;
                    n.mesh.virtual_stages = 0;
                }
                out.push(n);
            }
        }
    }
    // The interleaved schedule to plain 1F1B: a bug that is not about the chunks stays.
    if c.mesh.chunks() > 1 {
        let mut n = c.clone();
        n.mesh.schedule = Schedule::OneFOneB;
        n.mesh.virtual_stages = 0;
        out.push(n);
    }
    if c.mesh.zero > 0 {
        let mut n = c.clone();
        n.mesh.zero = 0;
        n.mesh.shard = 0;
        out.push(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An interleaved mesh shrinks to plain 1F1B, and a pipeline lowered to one rank drops the
    /// schedule its degree no longer has: every candidate is a mesh the spec language accepts.
    #[test]
    fn an_interleaved_mesh_shrinks_to_one_chunk_and_no_pipeline() {
        let text = "[run]\nname = \"t\"\n[models.m]\nlayers = 4\n[meshes.pp2]\npp = 2\n\
                    microbatches = 2\nschedule = \"interleaved\"\n";
        let disk = meshparity_specs::load::Disk;
        let path = std::path::Path::new("t.toml");
        let loaded = meshparity_specs::load::load_text(path, text.into(), &disk).unwrap();
        let s = &loaded.spec;
        let mesh = s.meshes["pp2"].config();
        let case = Case {
            model: s.models["m"].config(),
            mesh,
            training: s.run.training.clone(),
            dtype: DType::F32,
        };
        let meshes: Vec<meshparity_specs::MeshConfig> =
            smaller(&case).into_iter().map(|c| c.mesh).collect();
        assert!(meshes
            .iter()
            .any(|m| m.pp == 2 && m.schedule == Schedule::OneFOneB));
        for m in meshes.iter().filter(|m| m.pp == 1) {
            assert_eq!((m.schedule, m.chunks()), (Schedule::OneFOneB, 1), "{m:?}");
        }
        assert_eq!(super::super::mesh_name(&mesh), "pp2-mb2-interleaved-v2");
    }
}
