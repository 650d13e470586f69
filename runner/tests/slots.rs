//! Slots: CPU jobs share `-j`; each GPU is its own pool, so GPU jobs do not oversubscribe it
//! while CPU jobs run beside them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use meshparity_runner::exec::slots::Slots;
use meshparity_runner::exec::{RunOptions, Timeouts};
use meshparity_runner::{Job, JobKind, Plan};
use meshparity_specs::{load_text, Disk};

const SPEC: &str = r#"
[models.on-cpu]
[models.on-gpu]
device = "gpu"
[meshes.dp2]
dp = 2
[meshes.dp8]
dp = 8
[run]
batch = 16
[[matrix]]
levels = ["forward"]
"#;

fn options(cpu: usize, gpu: usize) -> RunOptions {
    RunOptions {
        exe: PathBuf::new(),
        spec: PathBuf::new(),
        run_dir: PathBuf::new(),
        cache_dir: PathBuf::new(),
        slots: cpu,
        gpu_slots: gpu,
        device: None,
        retries: 0,
        max_fail: None,
        timeouts: Timeouts::default(),
        grace: Duration::from_secs(1),
        no_cache: false,
        keep_artifacts: false,
        shrink: None,
        tries: None,
        executor: Default::default(),
        no_skip: false,
        lines: Default::default(),
        basis: Default::default(),
        spec_copy: None,
        memory: None,
    }
}

fn jobs() -> Vec<Job> {
    let spec = load_text(Path::new("slots.toml"), SPEC.into(), &Disk)
        .expect("valid")
        .spec;
    Plan::build(&spec)
        .jobs()
        .map(|(_, j)| j.clone())
        .filter(|j| j.kind != JobKind::Reference)
        .collect()
}

fn find<'a>(jobs: &'a [Job], model: &str, mesh: &str) -> &'a Job {
    jobs.iter()
        .find(|j| j.model() == model && j.mesh.as_deref() == Some(mesh))
        .expect("job in plan")
}

#[test]
fn a_gpu_runs_one_job_at_a_time_beside_the_cpu_jobs() {
    let jobs = jobs();
    let mut slots = Slots::new(&options(2, 1), []);
    let (gpu_a, gpu_b) = (find(&jobs, "on-gpu", "dp2"), find(&jobs, "on-gpu", "dp8"));
    let (cpu_a, cpu_b) = (find(&jobs, "on-cpu", "dp2"), find(&jobs, "on-cpu", "dp8"));
    assert!(slots.take(gpu_a));
    assert!(!slots.take(gpu_b), "the GPU is busy");
    assert!(slots.take(cpu_a), "CPU jobs do not wait for the GPU");
    assert!(
        slots.take(cpu_b),
        "a built-in dp8 takes one CPU slot: its ranks take turns"
    );
    assert!(!slots.take(cpu_a), "both CPU slots are in use");
    slots.release(cpu_a);
    slots.release(gpu_a);
    assert!(slots.take(gpu_b));
}

#[test]
fn gpu_slots_let_small_jobs_share_a_gpu() {
    let jobs = jobs();
    let mut slots = Slots::new(&options(1, 2), []);
    let gpu_a = find(&jobs, "on-gpu", "dp2");
    assert_eq!(slots.weight(gpu_a), 1);
    assert!(slots.take(gpu_a));
    assert!(slots.take(gpu_a));
    assert!(!slots.take(gpu_a));
    assert_eq!(slots.weight(find(&jobs, "on-gpu", "dp8")), 2);
}

/// A user's program launches one process per rank: a 2-rank job takes 2 CPU slots, so the
/// default `-j` on 2 cores runs one at a time (it counted ceil(2/4) = 1, and two torchrun jobs
/// ran at once under contention); the built-in engine's simulated ranks take one.
#[test]
fn a_program_takes_a_slot_per_rank_it_launches() {
    let spec = r#"
[engines.prog]
kind = "command"
program = "true"
artifacts = { curve = "m.jsonl" }
[models.m]
engine = "prog"
[models.builtin]
[meshes.dp2]
dp = 2
[meshes.dp8]
dp = 8
[[matrix]]
levels = ["curve"]
"#;
    let spec = load_text(Path::new("prog.toml"), spec.into(), &Disk)
        .expect("valid")
        .spec;
    let jobs: Vec<Job> = Plan::build(&spec)
        .jobs()
        .map(|(_, j)| j.clone())
        .filter(|j| matches!(j.kind, JobKind::Train { .. }))
        .collect();
    let mut slots = Slots::new(&options(2, 1), []);
    let (prog, builtin) = (find(&jobs, "m", "dp2"), find(&jobs, "builtin", "dp2"));
    assert_eq!(slots.weight(prog), 2);
    assert_eq!(slots.weight(builtin), 1);
    assert_eq!(slots.weight(find(&jobs, "builtin", "dp8")), 1);
    assert_eq!(slots.weight(find(&jobs, "m", "dp8")), 2, "at most the pool");
    assert!(slots.take(prog));
    assert!(
        !slots.take(prog),
        "a second 2-rank program waits for the first"
    );
    assert!(!slots.take(builtin));
}

/// A built-in job whose memory estimate is more than a CPU slot's share of the host's takes as
/// many slots as its memory needs (at most the pool), so that jobs running at once fit
/// together; one that fits its share takes one.
#[test]
fn a_job_needing_more_than_a_slots_memory_takes_more_slots() {
    let jobs = jobs();
    let mut opts = options(4, 1);
    opts.memory = Some(meshparity_runner::exec::Memory {
        room: 8.0,
        estimate: |job| if job.world_size == 8 { 5.0 } else { 2.0 },
    });
    let mut slots = Slots::new(&opts, []);
    let (small, big) = (find(&jobs, "on-cpu", "dp2"), find(&jobs, "on-cpu", "dp8"));
    assert_eq!(slots.weight(small), 1, "2 bytes of a 2-byte share");
    assert_eq!(slots.weight(big), 3, "5 bytes: three 2-byte shares");
    assert!(slots.take(big));
    assert!(slots.take(small));
    assert!(
        !slots.take(big),
        "a second big one waits: together they need more than there is"
    );
    opts.memory = Some(meshparity_runner::exec::Memory {
        room: 8.0,
        estimate: |_| 100.0,
    });
    assert_eq!(Slots::new(&opts, []).weight(big), 4, "at most the pool");
}
