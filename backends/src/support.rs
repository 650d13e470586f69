//! What the burn engine computes: the `llama` and `moe` families on dp/tp/sp/pp/cp/ep/etp
//! meshes, in every dtype (whether the device has kernels for it is asked when it opens). The
//! shape rules every framework shares (divisibility, SP for MoE with TP and EP) are the spec's
//! (`meshparity_specs::fit`), so nothing is left to refuse here; the seam stays so that a cell
//! this engine cannot run is refused at its spec value before anything runs.

use meshparity_specs::{DType, MeshConfig, ModelConfig, Unsupported};

pub fn supports(
    _model: &ModelConfig,
    _mesh: Option<&MeshConfig>,
    _dtype: DType,
) -> Result<(), Unsupported> {
    Ok(())
}
