"""A user's own torchtitan config registry, as torchtitan's `--module` imports one: torchtitan's
llama3 debug model on its DTensor path (`spmd_backend = "partial_dtensor"`) beside the default
`spmd_types` one, so llama3.toml checks both backends. A config function returns torchtitan's
Trainer config; meshparity's adapter then sets only the layout and the run's length."""

from torchtitan.models.llama3.config_registry import llama3_debugmodel


def llama3_debugmodel_dtensor():
    config = llama3_debugmodel()
    config.parallelism.spmd_backend = "partial_dtensor"
    return config
