//! `meshparity list devices`: what this machine and this build can compute on.

use meshparity_backends::device::{self, Adapter};

use crate::exit;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// The CPU backend and each GPU adapter, numbered as `--device gpu:N` names them.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: &Args) -> u8 {
    match &args.what {
        What::Devices { json } => devices(*json),
    }
}

fn devices(json: bool) -> u8 {
    let all = device::devices();
    if json {
        let doc = serde_json::json!({
            "gpu_backend_built": device::GPU_BUILT,
            "devices": all,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("devices serialize")
        );
        return exit::OK;
    }
    println!("{:<8} {:<8} {:<10} NAME", "DEVICE", "API", "KIND");
    for a in &all {
        println!(
            "{:<8} {:<8} {:<10} {}{}{}",
            a.device.to_string(),
            a.api,
            kind(a),
            a.name,
            if a.driver.is_empty() {
                String::new()
            } else {
                format!(" ({})", a.driver)
            },
            if a.note.is_empty() {
                String::new()
            } else {
                format!(" — {}", a.note)
            }
        );
    }
    if !device::GPU_BUILT {
        eprintln!(
            "note: this meshparity was built without the GPU backend; \
             `cargo build --release --features gpu` adds it"
        );
    } else if all.len() == 1 {
        eprintln!(
            "note: no GPU adapter found; install the GPU's Vulkan driver, or Mesa's EGL and \
             llvmpipe for a software one (`apt-get install libegl-mesa0 libgl1-mesa-dri`)"
        );
    }
    exit::OK
}

fn kind(a: &Adapter) -> &'static str {
    use device::AdapterKind::*;
    match a.kind {
        None => "cpu",
        Some(Discrete) => "discrete",
        Some(Integrated) => "integrated",
        Some(Virtual) => "virtual",
        Some(Other) => "other",
        Some(Software) => "software",
    }
}
