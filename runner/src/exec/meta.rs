//! Run metadata for the results: spec, its hash, host, git commit, backend and device.

use std::path::Path;
use std::process::Command;

use meshparity_engine::Description;
use meshparity_reports::RunMeta;
use meshparity_specs::{Device, ModelConfig, Spec};

use crate::engines::Engines;

/// The engine of each distinct (model, device) the jobs use, deduplicated in first-use order,
/// or why one cannot be used.
pub fn engines<'a>(
    engines: &dyn Engines,
    spec: &Spec,
    jobs: impl IntoIterator<Item = (&'a ModelConfig, Device)>,
) -> Result<Vec<Description>, crate::engines::OpenError> {
    let mut seen: Vec<Description> = Vec::new();
    for (model, device) in jobs {
        let target = crate::engines::Target {
            spec: Some(spec),
            model,
            device,
            variant: None,
            cache: Path::new(""),
        };
        let d = engines.describe(&target)?;
        if !seen.contains(&d) {
            seen.push(d);
        }
    }
    Ok(seen)
}

/// `engines`: what the run's jobs compute on (a run may mix the CPU and GPUs).
pub fn collect(
    engines: &[Description],
    spec: &Path,
    spec_name: &str,
    seed: u64,
    run_dir: &Path,
) -> RunMeta {
    let bytes = std::fs::read(spec).unwrap_or_default();
    let described: Vec<(&str, String)> = engines
        .iter()
        .map(|d| (d.engine.as_str(), d.device.clone()))
        .collect();
    let join = |f: &dyn Fn(&(&str, String)) -> String| {
        let mut parts: Vec<String> = Vec::new();
        for d in &described {
            let p = f(d);
            if !parts.contains(&p) {
                parts.push(p);
            }
        }
        parts.join(" + ")
    };
    let backend = join(&|d| d.0.to_owned());
    let device = join(&|d| d.1.clone());
    RunMeta {
        spec: spec.display().to_string(),
        spec_name: spec_name.to_owned(),
        spec_hash: blake3::hash(&bytes).to_hex().to_string(),
        git_commit: git_commit(spec),
        host: host(),
        backend,
        device,
        seed,
        meshparity_version: env!("CARGO_PKG_VERSION").to_owned(),
        started: now(),
        finished: String::new(),
        seconds: 0.0,
        interrupted: false,
        run_dir: run_dir.display().to_string(),
        disk_bytes: None,
        partition: None,
        filters: Vec::new(),
    }
}

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// The commit of the repository holding the spec: git's, where it is in one and git is
/// installed (a checkout another user owns included: CI containers run as root over the
/// runner's checkout, and git refused it as "dubious ownership", leaving the commit empty),
/// else the commit the CI system says it checked out (`GITHUB_SHA`, `CI_COMMIT_SHA`).
fn git_commit(spec: &Path) -> Option<String> {
    let dir = spec
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let out = Command::new("git")
        .args(["-c", "safe.directory=*"])
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|c| !c.is_empty());
    out.or_else(|| {
        ["GITHUB_SHA", "CI_COMMIT_SHA"]
            .iter()
            .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
    })
}
