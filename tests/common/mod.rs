//! What the binary's integration tests share.

#![allow(dead_code, unused_macros)]

/// The tiny llama every runner test trains: fast on two cores, divisible by every mesh the
/// tests use (dp2, tp2, pp2). A macro so specs can be `concat!`-ed constants.
macro_rules! tiny_model {
    () => {
        r#"
[models.tiny]
family = "llama"
layers = 2
hidden = 32
heads = 4
kv_heads = 2
ffn = 48
vocab = 64
seq_len = 8
"#
    };
}

/// Whether numpy and safetensors import (the Python consumers' programs need them); without
/// them a test says so and returns, except under CI, which installs them.
pub fn numpy() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import numpy, safetensors"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI installs numpy and safetensors"
        );
        eprintln!("skipped: pip install numpy safetensors");
    }
    ok
}
