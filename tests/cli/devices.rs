//! Devices: `list devices`, the GPU tolerance table in plans, and a GPU run on a build without
//! the GPU backend.

use crate::common::{cli as meshparity, stdout};

#[test]
fn list_devices_shows_the_cpu_first_and_says_whether_gpus_are_built_in() {
    let out = stdout(meshparity().args(["list", "devices", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["gpu_backend_built"], cfg!(feature = "gpu"));
    assert_eq!(v["devices"][0]["device"], "cpu");
    assert_eq!(v["devices"][0]["api"], "flex");
    for (n, d) in v["devices"].as_array().unwrap().iter().enumerate().skip(1) {
        let want = if n == 1 {
            "gpu".to_owned()
        } else {
            format!("gpu:{}", n - 1)
        };
        assert_eq!(d["device"], want.as_str());
    }
    let table = stdout(meshparity().args(["list", "devices"]));
    assert!(table.starts_with("DEVICE"), "{table}");
    assert!(table.contains("flex (CPU)"), "{table}");
}

#[test]
fn plan_on_a_gpu_uses_the_gpu_tolerance_table() {
    let out = stdout(meshparity().args([
        "plan",
        "examples/quickstart.toml",
        "--device",
        "gpu",
        "--format",
        "json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 110);
    for j in jobs {
        assert_eq!(j["device"], "gpu", "{j}");
        if let Some(t) = j.get("tolerance") {
            assert_eq!(t, "builtin-gpu", "{j}");
        }
    }
    meshparity()
        .args(["plan", "examples/quickstart.toml", "--device", "tpu"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("`tpu` is not a device"));
}

#[cfg(not(feature = "gpu"))]
#[test]
fn a_gpu_run_on_a_build_without_the_gpu_backend_says_how_to_get_one() {
    let dir = tempfile::tempdir().unwrap();
    meshparity()
        .args([
            "run",
            "examples/quickstart.toml",
            "--device",
            "gpu",
            "--run-dir",
        ])
        .arg(dir.path().join("run"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--features gpu"));
    assert!(
        !dir.path().join("run").exists(),
        "nothing starts when the device is missing"
    );
}
