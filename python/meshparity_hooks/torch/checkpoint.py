"""The roundtrip level through `torch.distributed.checkpoint`."""

import torch

from .collective import _collective, full


def roundtrip(model, seed_checkpoint, directory):
    """meshparity's roundtrip level through `torch.distributed.checkpoint`: load the full
    world-size-1 `seed_checkpoint` (safetensors, the model's state-dict names) into the sharded
    `model`, save it sharded to `directory` with DCP, load that back into a fresh state dict of
    the same layout, and return it gathered ({name: full tensor}; write it as
    `artifacts.roundtrip`). Collective.

    Through the module's own `state_dict` and `load_state_dict`, so its state-dict hooks run: a
    fused parameter saved under other names (torchtitan splits `wqkv` into `wq`/`wk`/`wv` on
    save and merges them on load) goes out and back as it does in the program's own
    checkpoints. DCP's `get_model_state_dict` resolves every key as an attribute path (a renamed
    key is none), and `set_model_state_dict` with full tensors copied plain tensors into
    DTensors ("got mixed torch.Tensor and DTensor"): each seed tensor is laid out first as the
    state dict's own entry is, every rank slicing its own copy."""
    import torch.distributed.checkpoint as dcp

    def load_full():
        from safetensors.torch import load_file
        return load_file(seed_checkpoint)

    seed = _collective(f"reading {seed_checkpoint}", load_full)
    like = model.state_dict()
    placed = {k: _laid_out_as(v, like.get(k)) for k, v in seed.items()}
    _collective("loading the seed checkpoint", lambda: model.load_state_dict(placed, strict=True))
    sharded = model.state_dict()
    _collective(f"saving to {directory}", lambda: dcp.save(sharded, checkpoint_id=directory))
    back = {k: torch.zeros_like(v) for k, v in sharded.items()}
    _collective(f"loading {directory}", lambda: dcp.load(back, checkpoint_id=directory))
    return {k: full(v) for k, v in back.items()}


def _laid_out_as(whole, entry):
    """`whole` (a full tensor) with the dtype and layout of the state dict's `entry`."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if entry is None:
        return whole
    whole = whole.to(entry.dtype)
    if isinstance(entry, DTensor):
        return distribute_tensor(whole, entry.device_mesh, entry.placements, src_data_rank=None)
    return whole
