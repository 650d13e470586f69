//! `[meshes.NAME]`: a parallel layout.

use serde::Serialize;

use crate::decode::{Ctx, Keyword, Table};
use crate::diagnostic::Diagnostic;
use crate::dtype::DType;
use crate::source::{Loc, Located};

pub const KEYS: &[&str] = &[
    "dp",
    "tp",
    "pp",
    "ep",
    "etp",
    "cp",
    "sp",
    "microbatches",
    "schedule",
];

/// Pipeline schedules.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema, serde::Deserialize,
)]
pub enum Schedule {
    /// All forwards, then all backwards.
    #[serde(rename = "gpipe")]
    GPipe,
    /// One forward, one backward in steady state (PipeDream-flush).
    #[serde(rename = "1f1b")]
    OneFOneB,
}

impl Keyword for Schedule {
    const WHAT: &'static str = "schedule";
    const ALL: &'static [(&'static str, Self)] =
        &[("gpipe", Schedule::GPipe), ("1f1b", Schedule::OneFOneB)];
}

/// The degrees of a mesh, without its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct MeshConfig {
    pub dp: u32,
    pub tp: u32,
    pub pp: u32,
    pub ep: u32,
    pub etp: u32,
    pub cp: u32,
    pub sp: bool,
    pub microbatches: u32,
    pub schedule: Schedule,
}

/// A rank's coordinates in a mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Coord {
    pub tp: usize,
    pub cp: usize,
    pub dp: usize,
    pub pp: usize,
}

impl MeshConfig {
    /// One rank: what a world-size-1 run is, as a mesh (reference traces, templates).
    pub const SINGLE: MeshConfig = MeshConfig {
        dp: 1,
        tp: 1,
        pp: 1,
        ep: 1,
        etp: 1,
        cp: 1,
        sp: false,
        microbatches: 1,
        schedule: Schedule::OneFOneB,
    };

    /// The one rank ↔ coordinate map, Megatron's order with tensor parallel fastest:
    /// rank = tp + TP·(cp + CP·(dp + DP·pp)). Expert groups (ep, etp) are carved out of dp·tp.
    pub fn rank(&self, c: Coord) -> usize {
        let (tp, cp, dp) = (self.tp as usize, self.cp as usize, self.dp as usize);
        c.tp + tp * (c.cp + cp * (c.dp + dp * c.pp))
    }

    /// Inverse of [`MeshConfig::rank`].
    pub fn coord(&self, rank: usize) -> Coord {
        let (tp, cp, dp) = (self.tp as usize, self.cp as usize, self.dp as usize);
        Coord {
            tp: rank % tp,
            cp: rank / tp % cp,
            dp: rank / (tp * cp) % dp,
            pp: rank / (tp * cp * dp),
        }
    }

    /// Ranks the mesh occupies: dp·tp·pp·cp (expert groups are carved out of dp·tp).
    pub fn world_size(&self) -> u64 {
        u64::from(self.dp) * u64::from(self.tp) * u64::from(self.pp) * u64::from(self.cp)
    }

    /// Tag used in job names and reports, e.g. `tp2-pp1-dp2-ep1-cp1-sp-f32`.
    pub fn tag(&self, dtype: DType) -> String {
        let mut tag = format!(
            "tp{}-pp{}-dp{}-ep{}-cp{}",
            self.tp, self.pp, self.dp, self.ep, self.cp
        );
        if self.etp > 1 {
            tag.push_str(&format!("-etp{}", self.etp));
        }
        if self.sp {
            tag.push_str("-sp");
        }
        if self.microbatches > 1 {
            tag.push_str(&format!("-mb{}", self.microbatches));
        }
        if self.pp > 1 {
            tag.push('-');
            tag.push_str(self.schedule.name());
        }
        tag.push('-');
        tag.push_str(dtype.as_str());
        tag
    }
}

/// A mesh as written, every degree located for messages.
#[derive(Clone, Debug)]
pub struct Mesh {
    pub name: Located<String>,
    pub dp: Located<u32>,
    pub tp: Located<u32>,
    pub pp: Located<u32>,
    pub ep: Located<u32>,
    pub etp: Located<u32>,
    pub cp: Located<u32>,
    pub sp: Located<bool>,
    pub microbatches: Located<u32>,
    pub schedule: Located<Schedule>,
    pub loc: Loc,
}

impl Mesh {
    pub fn decode(cx: &mut Ctx<'_>, name: Located<String>, mut t: Table<'_, '_>) -> Option<Mesh> {
        let one = Located::new(1, t.loc.clone());
        let mut degree =
            |t: &mut Table<'_, '_>, key| t.positive(cx, key).unwrap_or_else(|| one.clone());
        let dp = degree(&mut t, "dp");
        let tp = degree(&mut t, "tp");
        let pp = degree(&mut t, "pp");
        let ep = degree(&mut t, "ep");
        let etp = degree(&mut t, "etp");
        let cp = degree(&mut t, "cp");
        let microbatches = degree(&mut t, "microbatches");
        let sp = t
            .bool(cx, "sp")
            .unwrap_or_else(|| Located::new(false, t.loc.clone()));
        let schedule = t
            .keyword::<Schedule>(cx, "schedule")
            .unwrap_or_else(|| Located::new(Schedule::OneFOneB, t.loc.clone()));
        let mesh = Mesh {
            name,
            dp,
            tp,
            pp,
            ep,
            etp,
            cp,
            sp,
            microbatches,
            schedule,
            loc: t.loc.clone(),
        };
        t.finish(cx);
        mesh.check_shape(cx);
        Some(mesh)
    }

    fn check_shape(&self, cx: &mut Ctx<'_>) {
        let name = &self.name.value;
        if self.sp.value && self.tp.value < 2 {
            cx.error(
                Diagnostic::error(&self.sp.loc, format!("mesh `{name}`: sequence parallelism needs tp > 1"))
                    .help("SP shards the sequence across the tensor-parallel group; set tp ≥ 2 or drop `sp`"),
            );
        }
        let expert = u64::from(self.ep.value) * u64::from(self.etp.value);
        let dense = u64::from(self.dp.value) * u64::from(self.tp.value);
        if expert > 1 && dense % expert != 0 {
            cx.error(
                Diagnostic::error(
                    &self.ep.loc,
                    format!("mesh `{name}`: ep·etp = {expert} does not divide dp·tp = {dense}"),
                )
                .help("expert-parallel groups are carved out of the dp·tp ranks"),
            );
        }
        if self.world_size() > 1 << 20 {
            cx.error(Diagnostic::error(
                &self.loc,
                format!(
                    "mesh `{name}`: world size {} is beyond what can be simulated",
                    self.world_size()
                ),
            ));
        }
    }

    pub fn config(&self) -> MeshConfig {
        MeshConfig {
            dp: self.dp.value,
            tp: self.tp.value,
            pp: self.pp.value,
            ep: self.ep.value,
            etp: self.etp.value,
            cp: self.cp.value,
            sp: self.sp.value,
            microbatches: self.microbatches.value,
            schedule: self.schedule.value,
        }
    }

    pub fn world_size(&self) -> u64 {
        self.config().world_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_and_coord_are_inverse_and_tp_is_fastest() {
        let m = MeshConfig {
            dp: 2,
            tp: 2,
            pp: 2,
            ep: 1,
            etp: 1,
            cp: 2,
            sp: false,
            microbatches: 1,
            schedule: Schedule::OneFOneB,
        };
        for rank in 0..m.world_size() as usize {
            assert_eq!(m.rank(m.coord(rank)), rank);
        }
        let c = |tp, cp, dp, pp| Coord { tp, cp, dp, pp };
        assert_eq!(m.rank(c(1, 0, 0, 0)), 1);
        assert_eq!(m.rank(c(0, 1, 0, 0)), 2);
        assert_eq!(m.rank(c(0, 0, 1, 0)), 4);
        assert_eq!(m.rank(c(0, 0, 0, 1)), 8);
    }
}
