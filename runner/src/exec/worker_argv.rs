//! The worker's command line for one attempt of a job: what the executor runs, locally or in a
//! Slurm batch script.

use std::path::Path;

use super::executor::ExecutorKind;
use super::options::RunOptions;
use crate::plan::Job;

/// One attempt as its worker needs to know it.
pub struct Attempt<'a> {
    pub opts: &'a RunOptions,
    pub job: &'a Job,
    /// The attempt's directory.
    pub dir: &'a Path,
    pub attempt: u32,
    /// The job as planned here, when it could be written: the worker starts from it instead
    /// of re-planning the spec.
    pub job_file: Option<&'a Path>,
    /// Slots the job takes in its pool here.
    pub slots: usize,
    /// CPUs the job asks its executor for.
    pub cpus: usize,
}

/// Where `a`'s shrink search makes its tries, when the runner holds a directory in memory:
/// one per attempt, which the runner removes when the attempt ends, however it ended.
pub fn tries_dir(opts: &RunOptions, job: &Job, attempt: u32) -> Option<std::path::PathBuf> {
    let root = opts.tries.as_ref().filter(|_| opts.shrink.is_some())?;
    Some(root.join(format!("{}-{attempt}", job.id)))
}

/// `meshparity worker …` for `a` (the program itself is the executor's).
pub fn args(a: &Attempt<'_>) -> Vec<String> {
    let opts = a.opts;
    let mut args = vec![
        "worker".to_owned(),
        "--spec".into(),
        opts.spec.display().to_string(),
        "--job".into(),
        a.job.id.to_string(),
        "--out".into(),
        a.dir.display().to_string(),
        "--cache".into(),
        opts.cache_dir.display().to_string(),
        "--scratch".into(),
        opts.run_dir
            .join(super::run_dir::SCRATCH)
            .display()
            .to_string(),
        "--attempt".into(),
        a.attempt.to_string(),
        "--grace".into(),
        opts.grace.as_secs_f64().to_string(),
    ];
    if let Some(f) = a.job_file {
        args.extend(["--job-file".into(), f.display().to_string()]);
    }
    if opts.no_cache {
        args.push("--no-cache".into());
    }
    if opts.keep_artifacts {
        args.push("--keep-artifacts".into());
    }
    if let Some(s) = opts.shrink {
        args.extend(["--shrink".into(), s.seconds.to_string()]);
        if s.every {
            args.push("--shrink-caught".into());
        } else {
            // The first failing job of each kind shrinks: kinds are claimed in the run's
            // scratch directory.
            let claims = opts.run_dir.join(super::run_dir::SCRATCH);
            let claims = claims.join(crate::shrink::policy::CLAIMS);
            args.extend(["--shrink-claims".into(), claims.display().to_string()]);
        }
        if let Some(dir) = tries_dir(opts, a.job, a.attempt) {
            args.extend(["--shrink-tries".into(), dir.display().to_string()]);
        }
    }
    if let Some(device) = opts.device {
        args.extend(["--device".into(), device.to_string()]);
    }
    if a.job.device.is_cpu() {
        let threads = threads(&opts.executor, a.slots, a.cpus);
        args.extend(["--threads".into(), threads.to_string()]);
    }
    args
}

/// A CPU job's compute threads (worker/threads.rs): jobs side by side on this machine share
/// its cores as their slots do; a job on a cluster has the CPUs it asked for to itself, however
/// few slots `-j` gives it.
fn threads(executor: &ExecutorKind, slots: usize, cpus: usize) -> usize {
    match executor {
        ExecutorKind::Local => slots,
        ExecutorKind::Slurm(_) => cpus,
    }
}

#[cfg(test)]
mod tests {
    use super::{threads, ExecutorKind};

    #[test]
    fn a_local_job_gets_its_slots_and_a_slurm_job_the_cpus_it_asked_for() {
        // A dp2·tp2·pp2·cp2 training asks for 4 CPUs; `-j 2` gives it 2 slots here.
        assert_eq!(threads(&ExecutorKind::Local, 2, 4), 2);
        assert_eq!(threads(&ExecutorKind::Slurm(Default::default()), 2, 4), 4);
    }
}
