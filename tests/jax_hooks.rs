//! `meshparity_hooks.jax` on 8 simulated CPU devices: replica digests that group the devices
//! holding each index of an array and see one device's copy drift, gradients written at the
//! spec's point only, traces of the chosen steps, world size 1's dropout mask cut to a shard.
//! The checks are tests/consumers/jax_hooks_check.py; it prints `ok`.

mod common;

#[test]
fn jax_hooks_digest_trace_and_write_as_torch_hooks_do() {
    if !common::harness::jax() {
        return;
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let out = tempfile::tempdir().unwrap();
    let o = std::process::Command::new("python3")
        .arg(format!("{root}/tests/consumers/jax_hooks_check.py"))
        .arg(out.path())
        .env("PYTHONPATH", format!("{root}/python"))
        .env("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
        .env("JAX_PLATFORMS", "cpu")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && log.contains("ok"), "{log}");
}
