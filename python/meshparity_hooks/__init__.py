"""Write meshparity's artifacts from any training loop in a few lines.

    from meshparity_hooks import Recorder
    rec = Recorder(args.out)                 # the directory `{{out_dir}}` renders to
    rec.tensors("init.safetensors", model_state)          # before the first step
    for step in range(1, steps + 1):
        loss, logits, grads = train_step(...)
        rec.metric(step, loss=loss)                       # metrics.jsonl
        if step == 1:
            rec.tensors("logits.safetensors", {"logits": logits, "loss": loss})
            rec.tensors("grads.safetensors", grads)
    rec.tensors("final.safetensors", model_state)

Tensors may be numpy arrays, JAX arrays or torch tensors (bf16/f16 are written as f32, the
way meshparity compares them anyway). They must be *full* (world-size-1) tensors under their
world-size-1 names: gather your shards first (torch: `DTensor.full_tensor()`, FSDP's
`get_model_state_dict(..., full_state_dict=True)`; JAX: `np.asarray` of a sharded array).

Only one process writes: rank 0 by default (`RANK` from torchrun, else JAX's process index,
else 0); pass `rank=` to override. With torch.distributed (DTensor, FSDP2, sharded tensors),
use `meshparity_hooks.torch.Writer` instead: it gathers on every rank, writes on rank 0, and
turns one rank's error into an error on every rank instead of a hang.
"""

import json
import math
import os

__all__ = ["Recorder", "to_numpy"]
__version__ = "0.1.0"  # the meshparity binary's (tests/torch_hooks.rs checks both)


def _rank():
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    try:
        import jax  # noqa: F401

        return jax.process_index()
    except Exception:
        return 0


def to_numpy(x):
    """A C-contiguous numpy array of `x` (numpy, JAX, torch, or a Python number), its elements
    in logical (row-major) order.

    Contiguous because safetensors' numpy `save_file` writes an array's memory as it lies: a
    transposed view (`t.t()`, the gradient torch hands a norm's weight under HF's Qwen3) was
    written in storage order, scrambled, and an expanded one (`t.expand(2, 3)`, stride 0)
    read past its storage. Every writer of this package goes through here."""
    import numpy as np

    if hasattr(x, "detach"):  # torch
        x = x.detach().cpu()
        if str(x.dtype) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        return _logical(x.contiguous().numpy())
    a = np.asarray(x)
    if a.dtype.name in ("bfloat16", "float16"):
        a = a.astype(np.float32)
    return _logical(a)


def _logical(a):
    """`a` itself when its memory is in row-major order, else a row-major copy (0-d arrays stay
    0-d: `np.ascontiguousarray` makes them 1-d)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


class Recorder:
    """Artifacts of one run, written into `out`."""

    def __init__(self, out, metrics="metrics.jsonl", rank=None, truncate=True):
        self.out = out
        self.writer = (_rank() if rank is None else rank) == 0
        self.metrics_path = os.path.join(out, metrics)
        # The metrics file is emptied at the first metric, not here: a Recorder that only
        # writes tensors (into a trace directory, say) leaves a metrics file there alone.
        self.fresh = truncate
        self.fresh_inputs = truncate
        if self.writer:
            os.makedirs(out, exist_ok=True)

    def metric(self, step, **values):
        """One line of metrics.jsonl: {"step": step, name: value, ...}."""
        if not self.writer:
            return
        if self.fresh:
            open(self.metrics_path, "w").close()
            self.fresh = False
        row = {"step": int(step)}
        for k, v in values.items():
            v = float(to_numpy(v))
            row[k] = v if math.isfinite(v) else str(v)
        line = json.dumps(row).replace('"nan"', "NaN").replace('"inf"', "Infinity")
        line = line.replace('"-inf"', "-Infinity")
        with open(self.metrics_path, "a") as f:
            f.write(line + "\n")

    def inputs(self, step, ranks, name="inputs.jsonl"):
        """Step `step`'s lines of `name`: `ranks` maps each rank (device) to the rows it trained
        on, token ids [rows, tokens] (`meshparity_hooks.inputs`; map it as `artifacts.inputs`)."""
        if not self.writer:
            return
        from .inputs import write

        write(os.path.join(self.out, name), step, ranks, truncate=self.fresh_inputs)
        self.fresh_inputs = False

    def tensors(self, name, tensors):
        """A safetensors file of `tensors` ({name: tensor}); scalars become shape [1]."""
        if not self.writer:
            return
        from safetensors.numpy import save_file

        arrays = {}
        for k, v in tensors.items():
            a = to_numpy(v)
            arrays[k] = a.reshape(1) if a.ndim == 0 else a
        save_file(arrays, os.path.join(self.out, name))
