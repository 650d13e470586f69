//! Run metadata for the results: spec, its hash, host, git commit, backend and device.

use std::path::Path;
use std::process::Command;

use meshparity_reports::RunMeta;

pub fn collect(spec: &Path, spec_name: &str, seed: u64, run_dir: &Path) -> RunMeta {
    let bytes = std::fs::read(spec).unwrap_or_default();
    let (backend, device) = meshparity_backends::Backend::cpu().describe();
    RunMeta {
        spec: spec.display().to_string(),
        spec_name: spec_name.to_owned(),
        spec_hash: blake3::hash(&bytes).to_hex().to_string(),
        git_commit: git_commit(spec),
        host: host(),
        backend: backend.to_owned(),
        device,
        seed,
        meshparity_version: env!("CARGO_PKG_VERSION").to_owned(),
        started: now(),
        finished: String::new(),
        seconds: 0.0,
        interrupted: false,
        run_dir: run_dir.display().to_string(),
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

/// The commit of the repository holding the spec, if it is in one and git is installed.
fn git_commit(spec: &Path) -> Option<String> {
    let dir = spec
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
