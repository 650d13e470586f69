//! Comparing two ~1 GiB checkpoints of many tensors, side by side in one run with:
//! - the memory-scan floor: both files mapped and every 8-byte word touched, on every core;
//! - a plain sequential read(2) of both files into a buffer;
//! - the numpy way (`tests/consumers/numpy_compare.py`), as the anchors' scripts do it.
//!
//! `cargo bench -p meshparity-compare --bench compare` (MESHPARITY_BENCH_MB sets the size of
//! each checkpoint; default 1024). Fixtures are made once under target/bench-data.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use memmap2::Mmap;
use meshparity_compare::safetensors::{write, TensorData};
use meshparity_compare::{compare_checkpoints, TensorDtype, TensorOptions, Verdict};
use rayon::prelude::*;

const TENSOR_ELEMS: usize = 1 << 20; // 4 MiB per f32 tensor
const RUNS: usize = 3;

fn fixtures(mb: usize) -> (PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-data");
    std::fs::create_dir_all(&dir).unwrap();
    let tensors = (mb << 20) / (TENSOR_ELEMS * 4);
    let a = dir.join(format!("ref-{mb}mb.safetensors"));
    let b = dir.join(format!("cand-{mb}mb.safetensors"));
    if a.exists() && b.exists() {
        return (a, b);
    }
    eprintln!("writing two {mb} MiB checkpoints of {tensors} tensors...");
    let mut rng = fastrand::Rng::with_seed(42);
    let names: Vec<String> = (0..tensors)
        .map(|i| format!("model.layers.{}.w{}", i / 8, i % 8))
        .collect();
    let shape = [1024usize, TENSOR_ELEMS / 1024];
    let mut ref_bytes: Vec<Vec<u8>> = Vec::new();
    let mut cand_bytes: Vec<Vec<u8>> = Vec::new();
    for _ in 0..tensors {
        let vals: Vec<f32> = (0..TENSOR_ELEMS).map(|_| rng.f32() * 2.0 - 1.0).collect();
        // Parallel-training-like noise: most elements equal, some off by a few ulps.
        let cand: Vec<f32> = vals
            .iter()
            .map(|&x| {
                if rng.u8(..) < 32 {
                    f32::from_bits(x.to_bits() + rng.u32(0..4))
                } else {
                    x
                }
            })
            .collect();
        ref_bytes.push(vals.iter().flat_map(|x| x.to_le_bytes()).collect());
        cand_bytes.push(cand.iter().flat_map(|x| x.to_le_bytes()).collect());
    }
    for (path, data) in [(&a, &ref_bytes), (&b, &cand_bytes)] {
        let td: Vec<TensorData<'_>> = names
            .iter()
            .zip(data)
            .map(|(n, bytes)| TensorData {
                name: n,
                dtype: TensorDtype::F32,
                shape: &shape,
                bytes,
            })
            .collect();
        write(path, &td, &[]).unwrap();
    }
    (a, b)
}

/// Touch every word of both files through the same mmap path the engine uses, on every core.
fn memory_scan(a: &Path, b: &Path) -> u64 {
    let mut total = 0u64;
    for p in [a, b] {
        let f = std::fs::File::open(p).unwrap();
        let map = unsafe { Mmap::map(&f) }.unwrap();
        total ^= map
            .par_chunks(1 << 20)
            .map(|c| {
                c.chunks_exact(8).fold(0u64, |acc, w| {
                    acc ^ u64::from_le_bytes(w.try_into().unwrap())
                })
            })
            .reduce(|| 0, |x, y| x ^ y);
    }
    total
}

/// A plain sequential read(2) of both files into a reused buffer: what any reader pays.
fn plain_read(a: &Path, b: &Path) -> u64 {
    use std::io::Read;
    let mut buf = vec![0u8; 4 << 20];
    let mut total = 0u64;
    for p in [a, b] {
        let mut f = std::fs::File::open(p).unwrap();
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            total = total.wrapping_add(u64::from(buf[0]) + n as u64);
        }
    }
    total
}

fn best(mut f: impl FnMut() -> Duration) -> Duration {
    (0..RUNS).map(|_| f()).min().unwrap()
}

fn main() {
    let mb: usize = std::env::var("MESHPARITY_BENCH_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let (a, b) = fixtures(mb);
    let bytes =
        (std::fs::metadata(&a).unwrap().len() + std::fs::metadata(&b).unwrap().len()) as f64;
    memory_scan(&a, &b); // warm the page cache
    let floor = best(|| {
        let t = Instant::now();
        std::hint::black_box(memory_scan(&a, &b));
        t.elapsed()
    });
    let read = best(|| {
        let t = Instant::now();
        std::hint::black_box(plain_read(&a, &b));
        t.elapsed()
    });
    let ours = best(|| {
        let t = Instant::now();
        let r = compare_checkpoints(&a, &b, &TensorOptions::default()).unwrap();
        assert_eq!(
            r.verdict,
            Verdict::Match,
            "ulp noise is within the f32 defaults"
        );
        std::hint::black_box(r);
        t.elapsed()
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/consumers/numpy_compare.py");
    let numpy = (0..RUNS)
        .filter_map(|_| {
            let out = Command::new("python3")
                .arg(&script)
                .arg(&a)
                .arg(&b)
                .output()
                .ok()?;
            if !out.status.success() {
                eprintln!(
                    "numpy script failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                return None;
            }
            let secs: f64 = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(Duration::from_secs_f64(secs))
        })
        .min();
    let gbs = |d: Duration| bytes / d.as_secs_f64() / 1e9;
    println!(
        "compare bench: two checkpoints of {mb} MiB each ({} tensors of {} f32), {} cores, best of {RUNS}",
        (mb << 20) / (TENSOR_ELEMS * 4),
        TENSOR_ELEMS,
        rayon::current_num_threads()
    );
    println!("  {:<34} {:>9} {:>9}", "", "seconds", "GB/s");
    println!(
        "  {:<34} {:>9.3} {:>9.2}",
        "memory scan (mmap, all cores)",
        floor.as_secs_f64(),
        gbs(floor)
    );
    println!(
        "  {:<34} {:>9.3} {:>9.2}",
        "plain read(2) of both files",
        read.as_secs_f64(),
        gbs(read)
    );
    println!(
        "  {:<34} {:>9.3} {:>9.2}  {:.2} of the memory scan, {:.2} of the plain read",
        "meshparity compare (all metrics)",
        ours.as_secs_f64(),
        gbs(ours),
        floor.as_secs_f64() / ours.as_secs_f64(),
        read.as_secs_f64() / ours.as_secs_f64()
    );
    match numpy {
        Some(n) => println!(
            "  {:<34} {:>9.3} {:>9.2}  meshparity is {:.1}x faster",
            "numpy script (same metrics)",
            n.as_secs_f64(),
            gbs(n),
            n.as_secs_f64() / ours.as_secs_f64()
        ),
        None => println!("  numpy script: not run (needs python3 with numpy and safetensors)"),
    }
}
