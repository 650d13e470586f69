//! Planning a 100,000-job matrix: load + validate, DAG build, selection, and all together.
//!
//! `cargo bench -p meshparity-runner --bench plan`. The target is under one second end to end.

use std::path::Path;
use std::sync::LazyLock;

use meshparity_runner::{Filter, Partition, Plan};
use meshparity_specs::{load_text, Disk, Spec};

fn main() {
    let spec = load(&SPEC);
    let plan = Plan::build(&spec);
    eprintln!(
        "matrix: {} models × {} meshes → {} jobs",
        spec.models.len(),
        spec.meshes.len(),
        plan.len()
    );
    divan::main();
}

/// 50 models × 250 meshes, all levels, all mutations: 114,300 jobs.
static SPEC: LazyLock<String> = LazyLock::new(|| {
    let mut s = String::from("[run]\nbatch = 16\n[mutations]\nselect = [\"all\"]\n");
    for i in 0..50 {
        s += &format!(
            "[models.m{i}]\nlayers = 4\nhidden = 64\nheads = 4\nvocab = {}\nseq_len = 16\n",
            128 + 4 * i
        );
    }
    let mut n = 0;
    'outer: for &dp in &[1, 2, 4] {
        for &tp in &[1, 2, 4] {
            for &pp in &[1, 2, 4] {
                for &cp in &[1, 2] {
                    for &mb in &[1, 2, 4] {
                        if dp * mb > 16 {
                            continue;
                        }
                        s += &format!("[meshes.s{n}]\ndp = {dp}\ntp = {tp}\npp = {pp}\ncp = {cp}\nmicrobatches = {mb}\nsp = {}\n", tp > 1 && n % 2 == 0);
                        n += 1;
                        if n == 250 {
                            break 'outer;
                        }
                    }
                }
            }
        }
    }
    // The combinations above give fewer than 250; repeat them under new names.
    let base = n;
    while n < 250 {
        let k = n % base;
        s += &format!(
            "[meshes.r{n}]\ndp = {}\ntp = 2\npp = {}\n",
            1 << (k % 3),
            1 + k % 2
        );
        n += 1;
    }
    s
});

fn load(text: &str) -> Spec {
    load_text(Path::new("bench.toml"), text.to_owned(), &Disk)
        .expect("bench spec is valid")
        .spec
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn load_and_validate() -> Spec {
    load(&SPEC)
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn build_dag(b: divan::Bencher) {
    let spec = load(&SPEC);
    b.bench(|| Plan::build(&spec));
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn select_filter_and_partition(b: divan::Bencher) {
    let plan = Plan::build(&load(&SPEC));
    let filter = Filter::parse(&["level!=roundtrip", "mesh=s1*,r*"]).unwrap();
    b.bench(|| plan.select(&filter, Some(Partition::Hash { shard: 2, total: 8 })));
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn end_to_end(b: divan::Bencher) {
    b.bench(|| {
        let spec = load(&SPEC);
        let plan = Plan::build(&spec);
        plan.select(&Filter::default(), None).jobs.len()
    });
}
