//! The batch script of one attempt and its submission.
//!
//! The script runs the worker and writes its exit code into the attempt directory (Slurm's own
//! record of it is lost for cancelled and timed-out jobs, and ages out of `squeue`), then exits
//! with it so Slurm's state agrees. The Slurm job id goes into the directory too, so a resumed
//! run finds and adopts a job its killed predecessor submitted.

use std::path::Path;

use meshparity_judge::judge::quote;
use tokio::process::Command;

use super::state::{self, EXIT_FILE};
use super::SlurmConfig;
use crate::exec::executor::Launch;
use crate::exec::launch_error::LaunchError;

/// The attempt's Slurm job id, in its directory.
pub const JOB_FILE: &str = "slurm-job";
const SCRIPT: &str = "job.sh";

/// The id of the job running `l`: one a previous runner submitted for this very attempt (still
/// queued or running, or finished with the worker's exit code), or a new submission.
pub async fn adopt_or_submit(
    config: &SlurmConfig,
    exe: &Path,
    l: &Launch,
) -> Result<String, LaunchError> {
    std::fs::create_dir_all(&l.dir).map_err(LaunchError::io("creating", &l.dir))?;
    if let Ok(id) = std::fs::read_to_string(l.dir.join(JOB_FILE)) {
        let id = id.trim().to_owned();
        // Still queued or running, or ended with the worker's own exit code: its outcome is
        // this attempt's. Cancelled, timed out or lost: run it again.
        let known = state::query(std::slice::from_ref(&id)).await;
        let adopt = match known.get(&id) {
            Some(state::JobState::Pending | state::JobState::Running) => true,
            Some(state::JobState::Completed | state::JobState::Failed) => {
                l.dir.join(EXIT_FILE).exists()
            }
            _ => false,
        };
        if !id.is_empty() && adopt {
            return Ok(id);
        }
    }
    let _ = std::fs::remove_file(l.dir.join(EXIT_FILE));
    let script = l.dir.join(SCRIPT);
    std::fs::write(&script, script_text(exe, l, &config.env))
        .map_err(LaunchError::io("writing", &script))?;
    let args = sbatch_args(config, l, &script);
    let out = Command::new("sbatch")
        .args(&args)
        .output()
        .await
        .map_err(|source| LaunchError::Process {
            what: "running sbatch".into(),
            source,
            hint: " (is Slurm's client installed here?)",
        })?;
    if !out.status.success() {
        return Err(LaunchError::Refused {
            command: format!("sbatch {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    // `--parsable` prints `id` or `id;cluster`.
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or("").to_owned();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return Err(LaunchError::Answer(format!(
            "sbatch printed no job id: `{}`",
            text.trim()
        )));
    }
    meshparity_files::write_atomic(&l.dir.join(JOB_FILE), id.as_bytes())
        .map_err(LaunchError::io("recording the job id in", &l.dir))?;
    Ok(id)
}

/// The batch script: `[executor] env` exported (each value quoted; passed as sbatch's
/// `--export=ALL,K=V` list, a value with a comma was split into variables of its own —
/// `B = "x,LD_PRELOAD=…"` set `LD_PRELOAD`), then the worker, then its exit code recorded.
fn script_text(exe: &Path, l: &Launch, env: &[(String, String)]) -> String {
    let exports: String = env
        .iter()
        .map(|(k, v)| format!("export {k}={}\n", quote(v)))
        .collect();
    let argv: Vec<String> = std::iter::once(exe.display().to_string())
        .chain(l.args.iter().cloned())
        .map(|a| quote(&a))
        .collect();
    let exit = quote(&l.dir.join(EXIT_FILE).display().to_string());
    let tmp = quote(&l.dir.join(".exit-code.tmp").display().to_string());
    format!(
        "#!/bin/sh\n\
         # meshparity job {name} ({id}), attempt {attempt}\n\
         {exports}{argv}\n\
         code=$?\n\
         printf '%s\\n' \"$code\" > {tmp} && mv {tmp} {exit}\n\
         exit \"$code\"\n",
        name = l.name.replace('\n', " "),
        id = l.job_id,
        attempt = l.attempt,
        argv = argv.join(" "),
    )
}

fn sbatch_args(config: &SlurmConfig, l: &Launch, script: &Path) -> Vec<String> {
    let secs = l.timeout.as_secs().max(1);
    let mut args = vec![
        "--parsable".to_owned(),
        format!("--job-name=meshparity-{}", l.job_id),
        format!("--output={}", l.dir.join("stdout.log").display()),
        format!("--error={}", l.dir.join("stderr.log").display()),
        format!("--time={}:{:02}", secs / 60, secs % 60),
    ];
    match l.own_ranks.filter(|_| config.task_per_rank) {
        Some(ranks) => {
            args.push(format!("--ntasks={ranks}"));
            args.push("--cpus-per-task=1".into());
            if l.gpus > 0 {
                args.push("--gpus-per-task=1".into());
            }
        }
        None => {
            args.push("--ntasks=1".into());
            args.push(format!("--cpus-per-task={}", l.cpus.max(1)));
            if l.gpus > 0 {
                args.push(format!("--gpus={}", l.gpus));
            }
        }
    }
    for (flag, value) in [
        ("partition", &config.partition),
        ("account", &config.account),
        ("qos", &config.qos),
    ] {
        if let Some(v) = value {
            args.push(format!("--{flag}={v}"));
        }
    }
    args.extend(config.sbatch_args.iter().cloned());
    args.push(script.display().to_string());
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_script_quotes_every_argument_and_records_the_exit_code() {
        let l = Launch {
            index: 0,
            attempt: 2,
            name: "m@f32/dp2/forward".into(),
            job_id: "0123456789abcdef".into(),
            args: vec![
                "worker".into(),
                "--spec".into(),
                "/x/$(touch y).toml".into(),
            ],
            dir: "/runs/r/jobs/j/attempt-2".into(),
            timeout: Duration::from_secs(125),
            cpus: 2,
            gpus: 0,
            own_ranks: None,
            served: false,
        };
        let env = [
            ("NCCL_DEBUG".to_owned(), "WARN".to_owned()),
            ("B".to_owned(), "x,LD_PRELOAD=/tmp/evil.so".to_owned()),
        ];
        let s = script_text(Path::new("/bin/meshparity"), &l, &env);
        assert!(s.starts_with("#!/bin/sh\n"), "{s}");
        assert!(s.contains("\nexport NCCL_DEBUG=WARN\n"), "{s}");
        // What sh makes of the exports: one variable B, whole; no LD_PRELOAD.
        let exports: String = s
            .lines()
            .filter(|l| l.starts_with("export "))
            .collect::<Vec<_>>()
            .join("\n");
        let out = std::process::Command::new("sh")
            .env_remove("LD_PRELOAD")
            .args([
                "-c",
                &format!("{exports}\nprintf '%s|%s' \"$B\" \"${{LD_PRELOAD-unset}}\""),
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "x,LD_PRELOAD=/tmp/evil.so|unset"
        );
        assert!(s.contains("'/x/$(touch y).toml'"), "{s}");
        assert!(s.contains("exit \"$code\""), "{s}");
        let config = SlurmConfig {
            partition: Some("gpu".into()),
            sbatch_args: vec!["--exclusive".into()],
            env: vec![("NCCL_DEBUG".into(), "WARN".into())],
            ..SlurmConfig::default()
        };
        let a = sbatch_args(&config, &l, Path::new("/runs/job.sh"));
        assert!(a.contains(&"--time=2:05".to_owned()), "{a:?}");
        assert!(a.contains(&"--cpus-per-task=2".to_owned()), "{a:?}");
        assert!(a.contains(&"--partition=gpu".to_owned()), "{a:?}");
        assert!(!a.iter().any(|x| x.starts_with("--export")), "{a:?}");
        assert_eq!(a[a.len() - 2..], ["--exclusive", "/runs/job.sh"]);
        // A program on 4 GPUs that runs its ranks with srun: four tasks of one GPU each.
        let program = Launch {
            own_ranks: Some(4),
            served: false,
            cpus: 1,
            gpus: 4,
            ..l
        };
        let per_rank = SlurmConfig {
            task_per_rank: true,
            ..SlurmConfig::default()
        };
        let a = sbatch_args(&per_rank, &program, Path::new("/runs/job.sh"));
        for want in ["--ntasks=4", "--cpus-per-task=1", "--gpus-per-task=1"] {
            assert!(a.contains(&want.to_owned()), "{a:?}");
        }
        let a = sbatch_args(&SlurmConfig::default(), &program, Path::new("/runs/job.sh"));
        assert!(a.contains(&"--gpus=4".to_owned()) && a.contains(&"--ntasks=1".to_owned()));
    }
}
