"""A user's own torchtitan config registry, as torchtitan's `--module` imports one: torchtitan's
llama3 debug model on its DTensor path (`spmd_backend = "partial_dtensor"`) beside the default
`spmd_types` one, so llama3.toml checks both backends; and both with FlexAttention's blocks of 16
tokens, so context parallelism (which splits a sequence into 2·cp chunks of whole blocks) fits a
64-token sequence instead of 512. A config function returns torchtitan's Trainer config;
meshparity's adapter then sets only the layout and the run's length."""

from torchtitan.models.common.attention import FlexAttention
from torchtitan.models.llama3.config_registry import llama3_debugmodel


def llama3_debugmodel_dtensor():
    config = llama3_debugmodel()
    config.parallelism.spmd_backend = "partial_dtensor"
    return config


def _blocks(config, size):
    """FlexAttention's block size (the BlockMask's; on a GPU it tiles the kernel, the mask and
    the arithmetic are the same)."""
    for layer in config.model_spec.model.layers:
        inner = getattr(getattr(layer, "attention", None), "inner_attention", None)
        if isinstance(inner, FlexAttention.Config):
            inner.block_size = size
    return config


def llama3_debugmodel_blocks16():
    return _blocks(llama3_debugmodel(), 16)


def llama3_debugmodel_dtensor_blocks16():
    return _blocks(llama3_debugmodel_dtensor(), 16)


def qwen3_moe_small():
    """torchtitan's Qwen3 MoE debug config (its loss, optimizer, schedule, activation
    checkpointing and load balancing) with two smaller layers — 8 experts, top 2, experts 128
    wide — so a CPU trains it in seconds: the debug model's 64 experts of 768 × 256 in each of 8
    layers are 300 M parameters."""
    from torchtitan.models.common.rope import CosSinRoPE
    from torchtitan.models.qwen3 import _build_qwen3_moe_layers
    from torchtitan.models.qwen3.config_registry import qwen3_moe_debug

    config = qwen3_moe_debug()
    model = config.model_spec.model
    model.layers = _build_qwen3_moe_layers(
        n_layers=2, dim=model.dim, n_heads=4, n_kv_heads=2, head_dim=64, moe_hidden_dim=128,
        num_experts=8, top_k=2, attn_backend="flex", moe_comm_backend="standard",
        rope=CosSinRoPE.Config(dim=64, max_seq_len=4096, theta=1000000.0))
    return config


def qwen3_moe_small_dtensor():
    config = qwen3_moe_small()
    config.parallelism.spmd_backend = "partial_dtensor"
    return config
