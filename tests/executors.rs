//! The hostile program (tests/programs/hostile.sh) on every executor, local and Slurm: a
//! program that floods its output, one that ignores TERM and never exits, one that leaves
//! children in sessions of their own and in the background, one that plants its curve as a link
//! to a file outside the run. On each executor: the flood leaves a bounded run directory, the
//! orphaning program is judged when it exits, nothing any of them started outlives its job, and
//! the link is neither read nor written through.
//!
//! tests/programs.rs tests each of these locally in more detail (and `kill -9` of the runner,
//! which on Slurm leaves the jobs to the cluster by design: a resumed run adopts them).

#[macro_use]
mod common;

use std::path::Path;

use common::harness::{disk_use, gone_within, meshparity, results};
use common::slurm::cluster;
use serde_json::Value;

/// One engine per hostile mode, each a model on dp2 at the curve level; `mark` tags the
/// processes this run's programs start.
fn spec(mark: u32, outside: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/hostile.sh");
    let mut s = String::from("[run]\nname = \"hostile\"\nsteps = 2\n");
    let modes = ["flood", "orphans", "stubborn", "links"];
    for (i, mode) in modes.iter().enumerate() {
        s += &format!(
            "\n[engines.{mode}]\nkind = \"command\"\nprogram = \"sh\"\n\
             args = [\"{}\", \"{mode}\", \"{}\", \"{}\"]\ncwd = \"{{{{out_dir}}}}\"\n\
             artifacts = {{ curve = \"metrics.jsonl\" }}\n\n[models.{mode}]\nengine = \"{mode}\"\n",
            script.display(),
            mark * 10 + i as u32,
            outside.display(),
        );
    }
    s += "\n[meshes.dp2]\ndp = 2\n\n[[matrix]]\nmodels = [\"flood\", \"orphans\", \"stubborn\", \"links\"]\nlevels = [\"curve\"]\n";
    s
}

fn status<'a>(r: &'a Value, model: &str) -> &'a Value {
    r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| {
            j["name"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{model}@"))
        })
        .unwrap_or_else(|| panic!("no job of {model}: {r:#}"))
}

fn hostile_programs_on(executor: &str, mark: u32) {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside.jsonl");
    let kept = "{\"step\": 1, \"loss\": 5.0}\n";
    std::fs::write(&outside, kept).unwrap();
    std::fs::write(dir.path().join("spec.toml"), spec(mark, &outside)).unwrap();
    let out = meshparity(dir.path())
        .args(["run", "spec.toml", "--no-progress", "--run-dir", "run"])
        .args(["--executor", executor, "--timeout", "4", "--grace", "1"])
        .output()
        .unwrap();
    let run = dir.path().join("run");
    let r = results(&run);
    assert_eq!(out.status.code(), Some(3), "{r:#}");
    assert_eq!(status(&r, "flood")["status"], "timeout", "{r:#}");
    assert_eq!(status(&r, "stubborn")["status"], "timeout", "{r:#}");
    assert_eq!(status(&r, "orphans")["status"], "passed", "{r:#}");
    let links = status(&r, "links");
    assert_eq!(links["status"], "error", "{links:#}");
    assert!(
        links.to_string().contains("is a symbolic link"),
        "{links:#}"
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), kept);
    let size = disk_use(&run);
    assert!(size < 40 << 20, "{executor}: run directory {size} bytes");
    assert_eq!(
        gone_within(&format!(" {mark}"), 10),
        Vec::<String>::new(),
        "{executor}: processes of the jobs are left"
    );
}

#[test]
fn hostile_programs_on_the_local_executor() {
    hostile_programs_on("local", 631);
}

#[test]
fn hostile_programs_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    hostile_programs_on("slurm", 632);
}
