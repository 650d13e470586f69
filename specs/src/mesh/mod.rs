//! `[meshes.NAME]`: a parallel layout.
//!
//! - `axis.rs` — how each kind of axis (degree, flag, keyword, ZeRO stage) is decoded;
//! - `tests.rs` — rank order and the by-name accessors held to the table.

use serde::Serialize;

use crate::decode::{Ctx, Keyword, Table};
use crate::diagnostic::Diagnostic;
use crate::dtype::DType;
use crate::source::{Loc, Located};

/// The one table of mesh axes: every key of `[meshes.NAME]` once, with its type, default,
/// kind (how it is decoded) and meaning. The accepted keys ([`KEYS`]), the config
/// ([`MeshConfig`]), the decoded mesh with each value's location ([`Mesh`]) and the JSON
/// Schema's `Mesh` all come from it, so a new axis is one line here.
macro_rules! mesh_axes {
    ($(
        $(#[doc = $doc:literal])*
        $(#[serde($($serde:tt)*)])?
        $key:ident: $ty:ty = $default:expr, $kind:ident $(, schema($($schema:tt)*))?;
    )*) => {
        /// The keys of `[meshes.NAME]`.
        pub const KEYS: &[&str] = &[$(stringify!($key)),*];

        /// The degrees of a mesh, without its name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
        pub struct MeshConfig {
            $($(#[doc = $doc])* $(#[serde($($serde)*)])? pub $key: $ty,)*
        }

        impl MeshConfig {
            /// Every axis at its default: one rank.
            pub const DEFAULT: MeshConfig = MeshConfig { $($key: $default,)* };

            /// The axis `key`'s value where it is a count (a degree, microbatches, a ZeRO
            /// stage); `None` for a flag, a keyword or no such axis.
            pub fn count(&self, key: &str) -> Option<u32> {
                match key {
                    $(stringify!($key) => AxisValue::count(&self.$key),)*
                    _ => None,
                }
            }

            /// Set the count axis `key` to `n`; `false` (nothing set) for any other key.
            pub fn set_count(&mut self, key: &str, n: u32) -> bool {
                match key {
                    $(stringify!($key) => AxisValue::set_count(&mut self.$key, n),)*
                    _ => false,
                }
            }
        }

        /// A mesh as written, every value located for messages.
        #[derive(Clone, Debug)]
        pub struct Mesh {
            pub name: Located<String>,
            $(pub $key: Located<$ty>,)*
            pub loc: Loc,
            /// A `[[resume]]` pair's mesh: where its run started ([`crate::resume`]).
            pub resume: Option<ResumeFrom>,
        }

        impl Mesh {
            /// Every axis from `t`, its default (located at the table) where absent or wrong.
            fn decode_axes(cx: &mut Ctx<'_>, name: Located<String>, t: &mut Table<'_, '_>) -> Mesh {
                $(let $key = axis::$kind(t, cx, stringify!($key))
                    .unwrap_or_else(|| Located::new($default, t.loc.clone()));)*
                Mesh { name, $($key,)* loc: t.loc.clone(), resume: None }
            }

            /// World size 1 as a mesh, every axis at its default (located at `name`).
            pub fn single(name: Located<String>) -> Mesh {
                let loc = name.loc.clone();
                Mesh { name, $($key: Located::new($default, loc.clone()),)* loc, resume: None }
            }

            pub fn config(&self) -> MeshConfig {
                MeshConfig { $($key: self.$key.value,)* }
            }

            /// Where the axis `key` was written (its table where it was not); `None` for no
            /// such axis.
            pub fn loc_of(&self, key: &str) -> Option<&Loc> {
                match key {
                    $(stringify!($key) => Some(&self.$key.loc),)*
                    _ => None,
                }
            }
        }

        // The schema's description of `[meshes.NAME]` (`schema.rs`); a plain comment, so the
        // schema carries no description of its own.
        #[derive(schemars::JsonSchema)]
        #[schemars(deny_unknown_fields, rename = "Mesh")]
        #[allow(dead_code)]
        pub(crate) struct MeshSchema {
            $($(#[doc = $doc])* $(#[schemars($($schema)*)])? $key: Option<$ty>,)*
        }
    };
}

mesh_axes! {
    /// Data-parallel degree.
    dp: u32 = 1, degree, schema(range(min = 1));
    /// Tensor-parallel degree.
    tp: u32 = 1, degree, schema(range(min = 1));
    /// Pipeline-parallel degree (stages).
    pp: u32 = 1, degree, schema(range(min = 1));
    /// Expert-parallel degree (moe).
    ep: u32 = 1, degree, schema(range(min = 1));
    /// Expert tensor-parallel degree (moe).
    etp: u32 = 1, degree, schema(range(min = 1));
    /// Context-parallel degree.
    cp: u32 = 1, degree, schema(range(min = 1));
    /// Sequence parallelism within the TP group.
    sp: bool = false, flag;
    /// Microbatches per step (gradient accumulation / pipeline).
    microbatches: u32 = 1, degree, schema(range(min = 1));
    /// Pipeline schedule (default 1f1b).
    schedule: Schedule = Schedule::OneFOneB, keyword;
    /// Model chunks per pipeline rank under the interleaved schedule (Megatron's virtual
    /// pipeline size): rank p holds virtual stages p, p + pp, p + 2·pp, … Unset: 2 when
    /// interleaved.
    #[serde(default, skip_serializing_if = "is_zero")]
    virtual_stages: u32 = 0, degree, schema(range(min = 2));
    /// Sharded data parallelism (ZeRO stage): 0 replicates everything; 1 shards the optimizer
    /// state over the data-parallel group (Megatron's distributed optimizer: gradients
    /// reduce-scattered, each rank updates its shard, parameters all-gathered); 2 also keeps
    /// gradients sharded, reduced per microbatch; 3 also shards the parameters, all-gathered
    /// before each step's forward and backward (FSDP2's `fully_shard`).
    #[serde(default, skip_serializing_if = "is_zero")]
    zero: u32 = 0, zero_stage, schema(range(max = 3));
    /// Hybrid sharding: shard over groups of this many data-parallel ranks and replicate across
    /// the groups (HSDP). Unset: shard over the whole data-parallel group.
    #[serde(default, skip_serializing_if = "is_zero")]
    shard: u32 = 0, degree, schema(range(min = 1));
}

/// An axis's value as the by-name accessors see it: counts are `u32`.
trait AxisValue {
    fn count(&self) -> Option<u32> {
        None
    }

    fn set_count(&mut self, _n: u32) -> bool {
        false
    }
}

impl AxisValue for u32 {
    fn count(&self) -> Option<u32> {
        Some(*self)
    }

    fn set_count(&mut self, n: u32) -> bool {
        *self = n;
        true
    }
}

impl AxisValue for bool {}
impl AxisValue for Schedule {}

/// Axes added after others were in use are left out of a mesh's serialized form at their
/// default, so the jobs of meshes without them keep their identities (and cached artifacts).
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How each kind of axis is decoded.
mod axis;

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
    /// 1F1B over virtual stages: each rank holds several model chunks and alternates between
    /// them in groups of pp microbatches (Megatron's interleaved schedule, Narayanan et al.
    /// 2021).
    #[serde(rename = "interleaved")]
    Interleaved,
}

impl Keyword for Schedule {
    const WHAT: &'static str = "schedule";
    const ALL: &'static [(&'static str, Self)] = &[
        ("gpipe", Schedule::GPipe),
        ("1f1b", Schedule::OneFOneB),
        ("interleaved", Schedule::Interleaved),
    ];
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
    pub const SINGLE: MeshConfig = MeshConfig::DEFAULT;

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

    /// The parallel degrees by axis name, in the order templates and diagnoses list them.
    pub fn degrees(&self) -> [(&'static str, u32); 6] {
        [
            ("dp", self.dp),
            ("tp", self.tp),
            ("pp", self.pp),
            ("cp", self.cp),
            ("ep", self.ep),
            ("etp", self.etp),
        ]
    }

    /// Data-parallel indices per ZeRO shard group: hybrid `shard`, else the whole dp.
    pub fn shard_dp(&self) -> u32 {
        match self.shard {
            0 => self.dp,
            n => n,
        }
    }

    /// Model chunks each pipeline rank holds: `virtual_stages` (2 when unset) under the
    /// interleaved schedule, else 1.
    pub fn chunks(&self) -> u32 {
        match (self.schedule, self.virtual_stages) {
            (Schedule::Interleaved, 0) => 2,
            (Schedule::Interleaved, v) => v,
            _ => 1,
        }
    }

    /// Virtual pipeline stages in pipeline order: pp · chunks. Virtual stage s runs on
    /// pipeline rank s mod pp, as that rank's chunk s div pp.
    pub fn virtual_pp(&self) -> u32 {
        self.pp * self.chunks()
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
        if self.zero > 0 {
            tag.push_str(&format!("-z{}", self.zero));
        }
        if self.shard > 0 {
            tag.push_str(&format!("-hs{}", self.shard));
        }
        if self.pp > 1 {
            tag.push('-');
            tag.push_str(self.schedule.name());
            if self.chunks() > 1 {
                tag.push_str(&format!("-v{}", self.chunks()));
            }
        }
        tag.push('-');
        tag.push_str(dtype.as_str());
        tag
    }
}

impl Mesh {
    pub fn decode(cx: &mut Ctx<'_>, name: Located<String>, mut t: Table<'_, '_>) -> Option<Mesh> {
        let mesh = Mesh::decode_axes(cx, name, &mut t);
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
        self.check_sharding(cx);
        self.check_interleaving(cx);
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

    pub fn world_size(&self) -> u64 {
        self.config().world_size()
    }

    /// The interleaved schedule needs a pipeline, two or more chunks per rank and microbatches
    /// in whole groups of pp (Megatron asserts the same); `virtual_stages` means nothing
    /// without it.
    fn check_interleaving(&self, cx: &mut Ctx<'_>) {
        let name = &self.name.value;
        let (pp, mb) = (self.pp.value, self.microbatches.value);
        let interleaved = self.schedule.value == Schedule::Interleaved;
        let v = self.virtual_stages.value;
        if !interleaved {
            if v > 0 {
                cx.error(
                    Diagnostic::error(
                        &self.virtual_stages.loc,
                        format!("mesh `{name}`: `virtual_stages` needs `schedule = \"interleaved\"`"),
                    )
                    .help("virtual stages are the model chunks the interleaved schedule alternates between; set the schedule or drop the key"),
                );
            }
            return;
        }
        if pp < 2 {
            cx.error(
                Diagnostic::error(
                    &self.schedule.loc,
                    format!("mesh `{name}`: the interleaved schedule needs pp ≥ 2, found {pp}"),
                )
                .help("interleaving alternates model chunks between pipeline ranks; set pp ≥ 2"),
            );
        } else if v == 1 {
            cx.error(
                Diagnostic::error(
                    &self.virtual_stages.loc,
                    format!("mesh `{name}`: the interleaved schedule needs virtual_stages ≥ 2, found 1"),
                )
                .help("with one chunk per rank the schedule is 1f1b: set `schedule = \"1f1b\"` or virtual_stages ≥ 2"),
            );
        } else if mb % pp != 0 {
            cx.error(
                Diagnostic::error(
                    &self.microbatches.loc,
                    format!("mesh `{name}`: the interleaved schedule runs microbatches in groups of pp = {pp}, and {mb} is not a multiple of it"),
                )
                .label("not a multiple of pp")
                .help(format!("use microbatches = {} (or another multiple of pp)", pp * (mb / pp).max(1))),
            );
        }
    }

    /// Hybrid sharding needs sharded data parallelism and a shard group that divides dp.
    fn check_sharding(&self, cx: &mut Ctx<'_>) {
        let (name, shard, dp) = (&self.name.value, self.shard.value, self.dp.value);
        if shard == 0 {
            return;
        }
        if self.zero.value == 0 {
            cx.error(
                Diagnostic::error(
                    &self.shard.loc,
                    format!("mesh `{name}`: `shard` needs sharded data parallelism (zero ≥ 1)"),
                )
                .help("set `zero = 1`, `2` or `3`, or drop `shard`"),
            );
        } else if dp % shard != 0 {
            cx.error(
                Diagnostic::error(
                    &self.shard.loc,
                    format!("mesh `{name}`: shard = {shard} does not divide dp = {dp}"),
                )
                .help("hybrid sharding shards within groups of `shard` data-parallel ranks and replicates across them"),
            );
        } else if self.ep.value * self.etp.value > 1 {
            cx.error(
                Diagnostic::error(
                    &self.shard.loc,
                    format!("mesh `{name}`: hybrid sharding with expert parallelism is not simulated"),
                )
                .help("expert parameters shard over their whole expert-data-parallel group; drop `shard`"),
            );
        }
    }
}

#[cfg(test)]
mod tests;

/// Where a resumed run started: the mesh that trained its first `at` steps and saved them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct ResumeFrom {
    /// The `from` mesh's name, for messages.
    pub mesh: String,
    pub config: MeshConfig,
    /// Steps trained before the checkpoint (the first step the target trains is `at`).
    pub at: u32,
}
