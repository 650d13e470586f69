//! `[executor]`: where a run's jobs execute. `local` (the default) runs each as a process on
//! this machine; `slurm` submits each as a batch job to the cluster this machine submits to.
//! `meshparity run --executor …` and its flags override what the spec says.

use crate::decode::{Ctx, Keyword, Table};
use crate::source::{Loc, Located};

pub const KEYS: &[&str] = &[
    "kind",
    "partition",
    "account",
    "qos",
    "sbatch_args",
    "env",
    "tasks",
    "max_pending",
    "poll_seconds",
];

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecutorKindName {
    #[default]
    Local,
    Slurm,
}

impl Keyword for ExecutorKindName {
    const WHAT: &'static str = "executor kind";
    const ALL: &'static [(&'static str, Self)] = &[
        ("local", ExecutorKindName::Local),
        ("slurm", ExecutorKindName::Slurm),
    ];
}

/// How a program that launches its own ranks is given its resources.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tasks {
    /// One task holding every rank's CPUs or GPUs (the program runs `torchrun`, or JAX).
    #[default]
    One,
    /// One task per rank, one CPU or GPU each (the program runs `srun`).
    PerRank,
}

impl Keyword for Tasks {
    const WHAT: &'static str = "task layout";
    const ALL: &'static [(&'static str, Self)] =
        &[("one", Tasks::One), ("per-rank", Tasks::PerRank)];
}

/// `[executor]` as written.
#[derive(Clone, Debug, Default)]
pub struct ExecutorDef {
    pub kind: ExecutorKindName,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub sbatch_args: Vec<String>,
    /// Variables set for every job, beside the submitting environment (exported by the batch
    /// script; names are checked like a command engine's).
    pub env: Vec<(String, String)>,
    pub tasks: Tasks,
    /// Jobs submitted and not finished, at most (Slurm).
    pub max_pending: Option<u32>,
    /// Between two state polls (Slurm).
    pub poll_seconds: Option<u32>,
    pub loc: Option<Loc>,
}

impl ExecutorDef {
    pub fn decode(cx: &mut Ctx<'_>, mut t: Table<'_, '_>) -> ExecutorDef {
        let kind = t
            .keyword::<ExecutorKindName>(cx, "kind")
            .map_or(ExecutorKindName::Local, |k| k.value);
        let text = |v: Option<Located<String>>| v.map(|v| v.value);
        let def = ExecutorDef {
            kind,
            partition: text(t.string(cx, "partition")),
            account: text(t.string(cx, "account")),
            qos: text(t.string(cx, "qos")),
            sbatch_args: t
                .strings(cx, "sbatch_args")
                .map(|v| v.value.into_iter().map(|s| s.value).collect())
                .unwrap_or_default(),
            env: crate::env::string_table(cx, &mut t, "env")
                .into_iter()
                .map(|(k, v)| {
                    crate::env::env_key(cx, &k, &v, true);
                    (k, v.value)
                })
                .collect(),
            tasks: t
                .keyword::<Tasks>(cx, "tasks")
                .map_or(Tasks::One, |k| k.value),
            max_pending: t.positive(cx, "max_pending").map(|v| v.value),
            poll_seconds: t.positive(cx, "poll_seconds").map(|v| v.value),
            loc: Some(t.loc.clone()),
        };
        t.finish(cx);
        def
    }
}
