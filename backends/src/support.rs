//! What the burn engine computes: the dense llama family on dp/tp/sp/pp/cp meshes, in every dtype
//! (whether the device has kernels for it is asked when it opens). Everything else is refused
//! before anything runs, at the spec value that asks for it: a `moe` model used to run as a
//! dense llama and pass, which is worse than an error.

use meshparity_specs::{DType, Family, Field, MeshConfig, ModelConfig, Unsupported};

pub fn supports(
    model: &ModelConfig,
    mesh: Option<&MeshConfig>,
    _dtype: DType,
) -> Result<(), Unsupported> {
    if model.family != Family::Llama {
        return Err(Unsupported::new(
            Field::Family,
            format!(
                "the burn engine implements the dense `llama` family only, not `{}`",
                model.family.as_str()
            ),
        )
        .help("use family = \"llama\", or check this model with a command engine"));
    }
    let Some(mesh) = mesh else { return Ok(()) };
    for (axis, what, n) in [
        ("ep", "expert parallelism", mesh.ep),
        ("etp", "expert tensor parallelism", mesh.etp),
    ] {
        if n > 1 {
            return Err(Unsupported::new(
                Field::Axis(axis),
                format!("the burn engine does not simulate {what} ({axis} = {n}) yet"),
            )
            .help(format!(
                "drop this mesh from the matrix (or exclude it for this model), or set {axis} = 1"
            )));
        }
    }
    Ok(())
}
