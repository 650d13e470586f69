//! `meshparity --version` names the commit it was built from, so a report or a bug can be tied
//! to the code that produced it: `0.1.0 (abc1234)`, `+dirty` when the tree had changes, and just
//! the version outside a git checkout (a `cargo install` from a registry).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let version = env!("CARGO_PKG_VERSION");
    let full = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(commit) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            format!("{version} ({commit}{})", if dirty { "+dirty" } else { "" })
        }
        None => version.to_owned(),
    };
    println!("cargo:rustc-env=MESHPARITY_VERSION={full}");
    // A new commit or a checkout changes HEAD or the ref it points at.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
        println!("cargo:rerun-if-changed={dir}/index");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
