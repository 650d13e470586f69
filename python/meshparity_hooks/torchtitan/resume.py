"""A `[[resume]]` pair's run through torchtitan's own checkpointer.

A pair's run is the program run twice (docs/engines.md, "Resuming on another layout"):

- **saving** (`--save-at k --save-dir D`): torchtitan's `CheckpointManager`, enabled with
  `D` as its folder and `k` as its interval, saves the whole training state after step k as
  torchtitan does — DCP, sharded as the ranks hold it: the model (through its state-dict hooks),
  every optimizer, the LR schedulers, the data loader and the trainer's step — into
  `D/step-k`; the run stops there. Beside it, the state *merged*: the weights as
  `final.safetensors` and the optimizer's state as `optimizer.safetensors` (`exp_avg.NAME`,
  `exp_avg_sq.NAME`, `step`), gathered to world size 1's shapes.
- **resuming** (`--resume-from D --loaded-dir L`): the same checkpointer, load-only, with `D`
  as its folder: torchtitan's `train()` loads the latest step there onto this run's layout (its
  own resharding) and trains on from step k + 1; the state as loaded is written merged into `L`.
- `--state-at N --state-dir S`: after step N the merged state into `S`, training on.

What the checkpoint holds and how it is resharded is torchtitan's; the adapter only says where
and when, and writes the merged files meshparity compares.
"""

import torch

from ..torch import Writer
from .layout import whole


def configure(config, run):
    """torchtitan's checkpoint settings for a pair's run (off otherwise: config.py)."""
    c = config.checkpoint
    if run.save_at:
        c.enable = True
        c.folder = run.save_dir
        c.interval = run.save_at
        # The whole training state at the last step too (torchtitan's default keeps only the
        # model there), and no purge of older steps.
        c.last_save_model_only = False
        c.keep_latest_k = 0
    elif run.resume_from:
        c.enable = True
        c.folder = run.resume_from
        c.load_only = True


def optimizer_state(trainer):
    """Every optimizer's state by canonical parameter name, made whole: `exp_avg.NAME`,
    `exp_avg_sq.NAME` (AdamW's moments) and `step` (its count, int64). A parameter with no
    state yet (a fresh optimizer) has no entries. Collective, as `whole_parameters`."""
    from . import stages

    optimizers = list(trainer.optimizers.optimizers)
    out, count = {}, None
    for name, p in trainer.parameters():
        state = next((o.state[p] for o in optimizers if p in o.state), {})
        for key in ("exp_avg", "exp_avg_sq"):
            if key in state:
                out[f"{key}.{name}"] = whole(name, state[key], trainer.parallel_dims,
                                             batch_valued=False)
        if count is None and "step" in state:
            count = torch.tensor([int(state["step"])], dtype=torch.int64)
    out = stages.merged(trainer.parallel_dims, out)
    if count is not None:
        out["step"] = count
    return out


def write_merged(trainer, directory):
    """The training state, merged, into `directory`: `final.safetensors` (the weights) and
    `optimizer.safetensors`. Collective."""
    writer = Writer(directory, truncate=False)
    writer.tensors("final.safetensors", trainer.whole_parameters())
    writer.tensors("optimizer.safetensors", optimizer_state(trainer))
