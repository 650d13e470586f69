//! What one failing job trains, and how its repro describes it.

use meshparity_specs::{DType, MeshConfig, ModelConfig, Training};

/// What one failing job trains: the model, mesh, training settings and dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub model: ModelConfig,
    pub mesh: MeshConfig,
    pub training: Training,
    pub dtype: DType,
}

impl Case {
    /// `tp2, 1 layer, hidden 16, ffn 16, vocab 16, seq 4, batch 2, 1 step, f32`.
    pub fn describe(&self) -> String {
        self.describe_seen(|_| true)
    }

    /// [`Case::describe`] with only the sizes a program sees (`seen`: whether its templates
    /// name the value): a torchtitan config fixes its own layers and widths, and the spec's
    /// defaults for them, which the program never reads, would describe another model.
    pub fn describe_seen(&self, seen: impl Fn(&str) -> bool) -> String {
        let (m, t) = (&self.model, &self.training);
        let plural = |n: u32| if n == 1 { "" } else { "s" };
        let sizes = [
            ("layers", format!("{} layer{}", m.layers, plural(m.layers))),
            ("hidden", format!("hidden {}", m.hidden)),
            ("heads", format!("heads {}", m.heads)),
            ("ffn", format!("ffn {}", m.ffn)),
            ("vocab", format!("vocab {}", m.vocab)),
            ("seq_len", format!("seq {}", m.seq_len)),
            ("batch", format!("batch {}", t.batch)),
            ("steps", format!("{} step{}", t.steps, plural(t.steps))),
        ];
        let mut parts = vec![mesh_name(&self.mesh)];
        parts.extend(sizes.into_iter().filter(|(v, _)| seen(v)).map(|(_, s)| s));
        parts.push(self.dtype.to_string());
        parts.join(", ")
    }
}

/// A mesh's name from its degrees: `dp2-tp2-sp-pp2-mb2`, `world1` for one rank.
pub fn mesh_name(m: &MeshConfig) -> String {
    let mut parts: Vec<String> = m
        .degrees()
        .iter()
        .filter(|(_, n)| *n > 1)
        .map(|(a, n)| format!("{a}{n}"))
        .collect();
    if m.sp {
        parts.push("sp".into());
    }
    if m.microbatches > 1 {
        parts.push(format!("mb{}", m.microbatches));
    }
    if m.zero > 0 {
        parts.push(format!("z{}", m.zero));
    }
    if m.pp > 1 && m.schedule != meshparity_specs::Schedule::OneFOneB {
        parts.push(meshparity_specs::Keyword::name(m.schedule).to_owned());
        if m.chunks() > 1 {
            parts.push(format!("v{}", m.chunks()));
        }
    }
    if parts.is_empty() {
        "world1".into()
    } else {
        parts.join("-")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program's repro names only the sizes its templates pass it; the built-in engine's
    /// names them all.
    #[test]
    fn a_repro_describes_the_sizes_the_program_sees() {
        let text = "[run]\nname = \"t\"\nsteps = 1\nbatch = 2\n[models.m]\nlayers = 1\n\
                    [meshes.tp2]\ntp = 2\nsp = true\n";
        let disk = meshparity_specs::load::Disk;
        let path = std::path::Path::new("t.toml");
        let loaded = meshparity_specs::load::load_text(path, text.into(), &disk).unwrap();
        let s = &loaded.spec;
        let case = Case {
            model: s.models["m"].config(),
            mesh: s.meshes["tp2"].config(),
            training: s.run.training.clone(),
            dtype: DType::F32,
        };
        let all = case.describe();
        assert!(all.starts_with("tp2-sp, 1 layer, hidden "), "{all}");
        assert!(all.ends_with(", batch 2, 1 step, f32"), "{all}");
        let seen = case.describe_seen(|v| ["seq_len", "batch", "steps"].contains(&v));
        let seq = case.model.seq_len;
        assert_eq!(seen, format!("tp2-sp, seq {seq}, batch 2, 1 step, f32"));
    }
}
