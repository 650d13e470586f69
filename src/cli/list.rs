//! `meshparity list devices`: what this machine and this build can compute on.
//! `meshparity list mutations`: the catalog of bugs meshparity injects.

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
    /// Every catalogued mutation: what a mesh needs, where it is injected, what it reproduces.
    Mutations {
        /// Print the Markdown table docs/mutations.md holds.
        #[arg(long)]
        markdown: bool,
    },
}

pub fn run(args: &Args) -> u8 {
    match &args.what {
        What::Devices { json } => devices(*json),
        What::Mutations { markdown } => mutations(*markdown),
    }
}

fn mutations(markdown: bool) -> u8 {
    use meshparity_specs::catalog::CATALOG;
    if markdown {
        print!("{}", meshparity_specs::catalog::markdown());
        return exit::OK;
    }
    let width = CATALOG.iter().map(|m| m.name.len()).max().unwrap_or(0);
    println!(
        "{:width$}  {:9}  {:28}  NEEDS",
        "MUTATION", "PHASE", "INJECTED AT"
    );
    for m in CATALOG {
        let needs: Vec<&str> = m.needs.iter().map(|n| n.describe()).collect();
        println!(
            "{:width$}  {:9}  {:28}  {}",
            m.name,
            m.phase.as_str(),
            m.site,
            needs.join(", ")
        );
    }
    exit::OK
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
