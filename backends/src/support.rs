//! What the burn engine computes: the `llama` and `moe` families on dp/tp/sp/pp/cp meshes, in
//! every dtype (whether the device has kernels for it is asked when it opens). Expert
//! parallelism is refused before anything runs, at the spec value that asks for it (a `moe`
//! model once ran as a dense llama and passed, which is worse than an error).

use meshparity_specs::{DType, Field, MeshConfig, ModelConfig, Unsupported};

pub fn supports(
    _model: &ModelConfig,
    mesh: Option<&MeshConfig>,
    _dtype: DType,
) -> Result<(), Unsupported> {
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
