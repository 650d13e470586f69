"""The roundtrip level through `torch.distributed.checkpoint`."""

import torch

from .collective import _collective, full


def roundtrip(model, seed_checkpoint, directory):
    """meshparity's roundtrip level through `torch.distributed.checkpoint`: load the full
    world-size-1 `seed_checkpoint` (safetensors) into the sharded `model`, save it sharded to
    `directory` with DCP, load that back into a fresh state dict of the same layout, and return
    it gathered ({name: full tensor}; write it as `artifacts.roundtrip`). Collective."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )

    def load_full():
        from safetensors.torch import load_file
        return load_file(seed_checkpoint)

    seed = _collective(f"reading {seed_checkpoint}", load_full)
    _collective(
        "loading the seed checkpoint",
        lambda: set_model_state_dict(
            model, seed, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
        ),
    )
    sharded = get_model_state_dict(model)
    _collective(f"saving to {directory}", lambda: dcp.save(sharded, checkpoint_id=directory))
    back = {k: torch.zeros_like(v) for k, v in sharded.items()}
    _collective(f"loading {directory}", lambda: dcp.load(back, checkpoint_id=directory))
    return {k: full(v) for k, v in back.items()}
