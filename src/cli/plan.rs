//! `meshparity plan SPEC`

use std::path::PathBuf;

use meshparity_backends::parallel::Topology;
use meshparity_runner::plan::render;
use meshparity_runner::Plan;

use crate::exit;

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Dot,
    Json,
}

#[derive(clap::Args)]
pub struct Args {
    /// Spec file.
    spec: PathBuf,
    #[command(flatten)]
    select: super::SelectArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Show every rank group of the spec's mesh MESH instead of the plan: which global ranks
    /// form its tensor-, context-, data- and pipeline-parallel groups and the experts' groups
    /// (text or json)
    #[arg(long, value_name = "MESH")]
    explain_mesh: Option<String>,
}

pub fn run(args: &Args) -> u8 {
    let filter = match args.select.filter() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::SPEC_ERROR;
        }
    };
    let Some(loaded) = super::load_spec(&args.spec, args.select.device) else {
        return exit::SPEC_ERROR;
    };
    if args.select.check_size(&loaded.spec).is_err() {
        return exit::SPEC_ERROR;
    }
    if let Some(name) = &args.explain_mesh {
        return explain_mesh(&loaded.spec, name, args.format);
    }
    let plan = Plan::build(&loaded.spec);
    let sel = plan.select(&filter, args.select.partition);
    if !super::supported(&args.spec, &loaded, Some((&plan, &sel))) {
        return exit::SPEC_ERROR;
    }
    let source = super::display(&args.spec);
    let out = match args.format {
        Format::Text => render::text(&plan, &sel, &source),
        Format::Dot => render::dot(&plan, &sel),
        Format::Json => render::json(&plan, &sel, &source),
    };
    print!("{out}");
    if sel.is_empty() {
        eprintln!(
            "nothing selected: no job matches the filters and partition{}",
            super::hint(&plan, &args.select)
        );
        return exit::NOTHING_SELECTED;
    }
    exit::OK
}

/// `--explain-mesh NAME`: the mesh's topology, every group in global ranks.
fn explain_mesh(spec: &meshparity_specs::Spec, name: &str, format: Format) -> u8 {
    // A `[[resume]]` pair's mesh is explained as the layout that resumes.
    let Some(mesh) = spec.meshes.get(name).or_else(|| spec.resumed.get(name)) else {
        let names: Vec<&str> = spec
            .meshes
            .keys()
            .chain(spec.resumed.keys())
            .map(String::as_str)
            .collect();
        eprintln!(
            "error: --explain-mesh: the spec has no mesh `{name}`; {}",
            meshparity_specs::suggest::did_you_mean(name, &names, "mesh")
        );
        return exit::SPEC_ERROR;
    };
    let config = mesh.config();
    let explained = Topology::new(&config).explain();
    match format {
        Format::Text => {
            let degrees: Vec<String> = config
                .degrees()
                .iter()
                .map(|(axis, n)| format!("{axis} {n}"))
                .collect();
            println!(
                "mesh `{name}` ({}): {}",
                mesh.loc.position(),
                degrees.join(" · ")
            );
            if let Some(r) = &mesh.resume {
                println!("resumed from mesh `{}` after step {}", r.mesh, r.at);
            }
            print!("{}", explained.text());
        }
        Format::Json => {
            let out = serde_json::json!({ "mesh": name, "config": config, "topology": explained });
            println!(
                "{}",
                serde_json::to_string_pretty(&out).expect("plain data serializes")
            );
        }
        Format::Dot => {
            eprintln!("error: --explain-mesh prints text or json, not dot");
            return exit::SPEC_ERROR;
        }
    }
    exit::OK
}
