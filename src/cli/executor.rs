//! Where `meshparity run`'s jobs run: the `--executor` and Slurm flags, and the executor they
//! and the spec's `[executor]` table ask for.

use std::time::Duration;

use meshparity_runner::exec::executor::{slurm::SlurmConfig, ExecutorKind};

/// `meshparity run`'s executor flags.
#[derive(clap::Args, Debug)]
pub struct ExecutorArgs {
    /// Where jobs run: `local` processes (default) or one `slurm` batch job each; overrides
    /// `[executor] kind`.
    #[arg(long, value_name = "KIND", value_parser = ["local", "slurm"])]
    executor: Option<String>,
    /// Slurm partition (overrides `[executor] partition`).
    #[arg(long, value_name = "NAME")]
    slurm_partition: Option<String>,
    /// Slurm account (overrides `[executor] account`).
    #[arg(long, value_name = "NAME")]
    slurm_account: Option<String>,
    /// Slurm QOS (overrides `[executor] qos`).
    #[arg(long, value_name = "NAME")]
    slurm_qos: Option<String>,
    /// A further `sbatch` argument (repeatable; added to `[executor] sbatch_args`).
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    sbatch_arg: Vec<String>,
}

impl ExecutorArgs {
    /// The executor the spec's `[executor]` and the command line ask for, or why it cannot be
    /// used.
    pub fn kind(&self, spec: &meshparity_specs::Spec) -> Result<ExecutorKind, String> {
        let def = &spec.executor;
        let slurm = match self.executor.as_deref() {
            Some(kind) => kind == "slurm",
            None => def.kind == meshparity_specs::ExecutorKindName::Slurm,
        };
        if !slurm {
            return Ok(ExecutorKind::Local);
        }
        let probe = std::process::Command::new("sbatch")
            .arg("--version")
            .output();
        if !probe.is_ok_and(|o| o.status.success()) {
            return Err(
                "the slurm executor needs Slurm's client commands (sbatch, squeue, scancel) on this \
                 machine's PATH; none was found"
                    .into(),
            );
        }
        let pick =
            |cli: &Option<String>, spec: &Option<String>| cli.clone().or_else(|| spec.clone());
        let defaults = SlurmConfig::default();
        Ok(ExecutorKind::Slurm(SlurmConfig {
            partition: pick(&self.slurm_partition, &def.partition),
            account: pick(&self.slurm_account, &def.account),
            qos: pick(&self.slurm_qos, &def.qos),
            sbatch_args: def
                .sbatch_args
                .iter()
                .chain(&self.sbatch_arg)
                .cloned()
                .collect(),
            env: def.env.clone(),
            task_per_rank: def.tasks == meshparity_specs::executor::Tasks::PerRank,
            max_pending: def.max_pending.map_or(defaults.max_pending, |n| n as usize),
            poll: def
                .poll_seconds
                .map_or(defaults.poll, |s| Duration::from_secs(s.into())),
        }))
    }
}
