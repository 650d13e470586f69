//! What a command engine lets shrink (`[engines.NAME.shrink]`): a candidate is tried only if
//! every value it lowers is named there and stays at or above its floor, and nothing else
//! about it changed but what follows from those (sequence parallelism off with tp 1, ZeRO off
//! without data parallelism). The built-in engine has no floors: every candidate is tried.

use meshparity_specs::engine_shrink::{ShrinkFloors, SHRINKABLE};

use super::Case;

/// `key`'s value in `c`.
fn get(c: &Case, key: &str) -> Option<u32> {
    let (m, t, mesh) = (&c.model, &c.training, &c.mesh);
    Some(match key {
        "layers" => m.layers,
        "hidden" => m.hidden,
        "heads" => m.heads,
        "kv_heads" => m.kv_heads,
        "ffn" => m.ffn,
        "vocab" => m.vocab,
        "seq_len" => m.seq_len,
        "experts" => m.experts?,
        "batch" => t.batch,
        "steps" => t.steps,
        // A mesh's counts by name, from the one table of axes.
        _ => return mesh.count(key),
    })
}

/// Put `key` of `c` back to `from`'s value.
fn restore(c: &mut Case, from: &Case, key: &str) {
    let (m, t, mesh) = (&mut c.model, &mut c.training, &mut c.mesh);
    match key {
        "layers" => m.layers = from.model.layers,
        "hidden" => m.hidden = from.model.hidden,
        "heads" => m.heads = from.model.heads,
        "kv_heads" => m.kv_heads = from.model.kv_heads,
        "ffn" => m.ffn = from.model.ffn,
        "vocab" => m.vocab = from.model.vocab,
        "seq_len" => m.seq_len = from.model.seq_len,
        "experts" => m.experts = from.model.experts,
        "batch" => t.batch = from.training.batch,
        "steps" => {
            t.steps = from.training.steps;
            t.oracle_steps = from.training.oracle_steps;
        }
        _ => {
            if let Some(n) = from.mesh.count(key) {
                mesh.set_count(key, n);
            }
        }
    }
}

/// Whether `floors` (`None`: the built-in engine's, none) let `current` shrink to `candidate`.
pub fn allows(floors: Option<&ShrinkFloors>, current: &Case, candidate: &Case) -> bool {
    let Some(floors) = floors else {
        return true;
    };
    let mut lowered = false;
    let mut back = candidate.clone();
    for key in SHRINKABLE {
        let (now, next) = (get(current, key), get(candidate, key));
        if now == next {
            continue;
        }
        match (floors.floor(key), next) {
            (Some(floor), Some(v)) if v >= floor => lowered = true,
            _ => return false,
        }
        restore(&mut back, current, key);
    }
    // What follows from a lowered degree, and only that.
    back.mesh.sp = current.mesh.sp;
    back.mesh.zero = current.mesh.zero;
    back.mesh.shard = current.mesh.shard;
    lowered && back == *current
}

#[cfg(test)]
mod tests {
    use super::allows;
    use crate::shrink::Case;
    use meshparity_specs::engine_shrink::ShrinkFloors;
    use meshparity_specs::{DType, Located};

    /// A 4-layer model on tp2 with sequence parallelism, and floors layers ≥ 2, tp ≥ 1.
    fn case() -> (Case, ShrinkFloors) {
        let text = "[run]\nname = \"t\"\n[models.m]\nlayers = 4\nhidden = 64\n\
                    [meshes.tp2]\ntp = 2\nsp = true\n[[matrix]]\nlevels = [\"forward\"]\n";
        let path = std::path::Path::new("t.toml");
        let disk = meshparity_specs::load::Disk;
        let loaded = meshparity_specs::load::load_text(path, text.into(), &disk).unwrap();
        let s = &loaded.spec;
        let loc = s.models["m"].layers.loc.clone();
        let floors = ShrinkFloors {
            floors: vec![
                ("layers", Located::new(2, loc.clone())),
                ("tp", Located::new(1, loc)),
            ],
        };
        let case = Case {
            model: s.models["m"].config(),
            mesh: s.meshes["tp2"].config(),
            training: s.run.training.clone(),
            dtype: DType::Bf16,
        };
        (case, floors)
    }

    #[test]
    fn a_command_engine_shrinks_only_what_it_names_down_to_its_floor() {
        let (now, floors) = case();
        let floors = Some(&floors);
        let with = |f: &dyn Fn(&mut Case)| {
            let mut c = now.clone();
            f(&mut c);
            c
        };
        assert!(allows(floors, &now, &with(&|c| c.model.layers = 2)));
        // Under its floor, not named, or another dtype: not tried.
        assert!(!allows(floors, &now, &with(&|c| c.model.layers = 1)));
        assert!(!allows(floors, &now, &with(&|c| c.model.hidden = 32)));
        assert!(!allows(floors, &now, &with(&|c| c.dtype = DType::F32)));
        // tp 1 takes sequence parallelism with it; sp alone is no shrink step.
        let tp1 = with(&|c| {
            c.mesh.tp = 1;
            c.mesh.sp = false;
        });
        assert!(allows(floors, &now, &tp1));
        assert!(!allows(floors, &now, &with(&|c| c.mesh.sp = false)));
        // The built-in engine: anything.
        assert!(allows(None, &now, &with(&|c| c.model.hidden = 32)));
    }
}
