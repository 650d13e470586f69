"""Bug switches (`--bug NAME`): real mistakes of torchtitan and PyTorch setups, replayed in
torchtitan's own training step. Each is code on the parallel path — it changes nothing at
world size 1 — and names the report it replays:

    clip-local-norm          clipping by the norm of each rank's own gradient shards, the norm
                             `clip_grad_norm_` returned under FSDP2 (pytorch#170862,
                             torchtitan#766)
    local-loss-normalization each data-parallel rank divides its loss by its own count of
                             counted tokens, torchtitan's normalization before PR #2206
    fsdp-gradient-average    FSDP averages the gradients over its shard group while the loss is
                             already normalized by the global token count (the averaging
                             torchtitan PR #2206 had to disable)
    init-per-rank-seed       each rank draws the initial weights from seed + rank and keeps its
                             own shard of its own draw (torchtitan PR #1363)
    sp-norm-grad-unreduced   under sequence parallelism a norm's weight gradient is taken as
                             already reduced: each tensor-parallel rank keeps its own partial sum
                             (Megatron-LM#1446, gpt-neox PR #1259, PaddleNLP PR #7610)
    logits-shard-as-whole    the first step's logits written as the rank's vocabulary shard, as
                             if it were the whole tensor (meshparity's own torch hooks under
                             torchtitan's spmd_types backend)
    pp-clip-stage-norm       clipping by each pipeline stage's own gradient norm, not reduced
                             over the stages (torchtitan#596, fixed by PR #649; Modalities#313)
    pp-microbatch-loss-normalization
                             each pipeline microbatch's loss its own token mean, averaged over the
                             microbatches (torchtitan's per-microbatch normalization before
                             PR #2206, issue #1842)
    pp-loss-normalized-after-backward
                             the pipeline's loss divided by the global token count only after the
                             schedule ran backward: the logged loss right, the gradients those of
                             the summed loss (torchtitan PR #4194, Forge's trainer)
    cp-rope-local-positions  under context parallelism each rank's rotary embedding taken from
                             its chunk's own column index (0 … S/cp − 1) instead of the positions
                             the split handed it: RoPE keyed on the local length (NeMo Automodel
                             PR #2377; Megatron-LM#560, #1612)
    ep-expert-grad-scaled-by-ep
                             the routed experts' gradients `ep` times too large under expert
                             parallelism: the tokens of the whole expert-parallel group counted
                             again by the reduction (pytorch#160285, fixed in torchtitan by PR
                             #1551; Megatron-LM PR #5956; the built-in catalog's bug of the name)

Bugs of resumption, injected on `[[resume]]` pairs only (a pair's two runs both get the switch;
the built-in catalog's bugs of the same names):

    resume-optimizer-moments-dropped
                             the optimizers' state read and loaded through DCP without first
                             materializing a fresh optimizer's state: a resumed optimizer has no
                             moment tensors for the checkpoint's to land in, and AdamW restarts
                             (KempnerForge PR #115; the reason torchtitan's container calls
                             `init_optim_state` first)
    resume-data-position-reset
                             the data loader left out of the checkpoint: the resumed run draws
                             the data from its first batch again (KempnerForge#51, fixed in PR
                             #52)
    resume-lr-schedule-reset the LR schedulers left out of the checkpoint: the resumed run's
                             schedule starts over, warmup included (vllm-project/speculators PR
                             #900, lightly-ai/lightly-train PR #301)
"""

import torch.distributed as dist

BUGS = [
    "clip-local-norm",
    "local-loss-normalization",
    "fsdp-gradient-average",
    "init-per-rank-seed",
    "sp-norm-grad-unreduced",
    "logits-shard-as-whole",
    "pp-clip-stage-norm",
    "pp-microbatch-loss-normalization",
    "pp-loss-normalized-after-backward",
    "cp-rope-local-positions",
    "ep-expert-grad-scaled-by-ep",
    "resume-optimizer-moments-dropped",
    "resume-data-position-reset",
    "resume-lr-schedule-reset",
]


def init_seed(bug, seed):
    """The seed the world-size-1 initial weights are drawn from on this rank."""
    if bug == "init-per-rank-seed" and dist.is_initialized():
        return seed + dist.get_rank()
    return seed


def install(trainer, bug):
    """Inject `bug` into `trainer` (a ParityTrainer after its own set-up). Two bugs act
    elsewhere: `init-per-rank-seed` through `init_seed`, `logits-shard-as-whole` where the
    trainer writes the logits."""
    if bug in ("none", "", None, "init-per-rank-seed", "logits-shard-as-whole"):
        return
    installers = {
        "clip-local-norm": _local_clip,
        "local-loss-normalization": _local_normalization,
        "fsdp-gradient-average": _fsdp_average,
        "sp-norm-grad-unreduced": _norm_grads_unreduced,
        "ep-expert-grad-scaled-by-ep": _expert_grads_scaled,
        "pp-clip-stage-norm": _stage_clip,
        "pp-microbatch-loss-normalization": _microbatch_normalization,
        "pp-loss-normalized-after-backward": _normalized_after_backward,
        "cp-rope-local-positions": _local_positions,
        "resume-optimizer-moments-dropped": _optimizer_state_unmaterialized,
        "resume-data-position-reset": lambda t: _left_out_of_checkpoint(t, "dataloader"),
        "resume-lr-schedule-reset": lambda t: _left_out_of_checkpoint(t, "lr_scheduler"),
    }
    if bug not in installers:
        raise ValueError(f"unknown bug `{bug}`; the bugs are: {', '.join(BUGS)}")
    installers[bug](trainer)


def _local_clip(trainer):
    """`clip_grad_norm_` over each rank's own shards: the norm of the local gradients."""
    from ..torch.norm import local_clip

    trainer.clip = lambda parameters, max_norm, *args, **kwargs: local_clip(parameters, max_norm)


def _local_normalization(trainer):
    """The loss divided by this rank's count of counted tokens, not the global count."""
    from torchtitan.components.loss import IGNORE_INDEX

    step = trainer.forward_backward_step

    def local(*, input_dict, labels, global_valid_tokens):
        # Under pipelining the step's labels are a list, one per microbatch.
        parts = labels if isinstance(labels, list) else [labels]
        mine = sum((part != IGNORE_INDEX).sum() for part in parts)
        mine = mine.to(global_valid_tokens.device)
        return step(input_dict=input_dict, labels=labels, global_valid_tokens=mine)

    trainer.forward_backward_step = local


def _fsdp_average(trainer):
    """Every FSDP module divides its reduced gradients by its shard group's size."""
    for group in _param_groups(trainer):
        group.gradient_divide_factor = float(group.mesh_info.shard_mesh_size)


def _norm_grads_unreduced(trainer):
    """A norm's weight gradient, Partial over the tensor-parallel ranks under sequence
    parallelism, taken as Replicate without its all-reduce: each rank keeps its own part."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    def unreduced(g):
        if not isinstance(g, DTensor) or not any(isinstance(p, Partial) for p in g.placements):
            return g
        placements = [Replicate() if isinstance(p, Partial) else p for p in g.placements]
        return DTensor.from_local(g.to_local(), g.device_mesh, placements, run_check=False)

    _fsdp_norm_grads_unreduced(trainer)
    for part in trainer.model_parts:
        for name, p in part.named_parameters():
            if "norm" in name and isinstance(p, DTensor):
                p.register_hook(unreduced)


def _fsdp_norm_grads_unreduced(trainer):
    """The same bug where FSDP wraps the norms (torchtitan always applies it, dp_shard = 1
    included): FSDP turns the unsharded gradient into its stored placements in
    `FSDPParam._get_grad_inner_tensor`, which issues "the TP all-reduce of a SequenceParallel
    norm weight's Partial gradient". On the DTensor path the gradient arrives as a Partial
    DTensor; on spmd_types as a plain tensor FSDP wraps with the Partial placements its SPMD
    types gave (`_spmd_grad_placements`). Either way the bug declares it Replicate there, so
    the all-reduce is never issued and each tensor-parallel rank keeps its own part."""
    from torch.distributed.tensor import DTensor, Replicate

    def as_reduced(placements, dp):
        return tuple(Replicate() if p.is_partial() and i not in dp else p
                     for i, p in enumerate(placements))

    for group in _param_groups(trainer):
        for fp in group.fsdp_params:
            if "norm" not in type(fp._module_info.module).__name__.lower():
                continue
            dp = set(fp._dp_dim_indices) if fp.mesh_info.is_spmd_mesh else set()
            if fp.is_spmd_types:
                fp._spmd_grad_placements = as_reduced(fp._spmd_grad_placements, dp)
                continue
            inner = fp._get_grad_inner_tensor

            def unreduced(grad, inner=inner, dp=dp):
                if isinstance(grad, DTensor):
                    grad = DTensor.from_local(grad.to_local(), grad.device_mesh,
                                              as_reduced(grad.placements, dp),
                                              run_check=False)
                return inner(grad)

            fp._get_grad_inner_tensor = unreduced


def _param_groups(trainer):
    """Every FSDP parameter group of the model parts: a module holds one per mesh its
    parameters are sharded on (under expert parallelism the experts' own)."""
    from torch.distributed.fsdp import FSDPModule

    for part in trainer.model_parts:
        for m in part.modules():
            if isinstance(m, FSDPModule):
                yield from m._get_fsdp_state()._fsdp_param_groups


def _expert_grads_scaled(trainer):
    """The routed experts' gradients left `ep` times too large at the step: a rank's expert
    gradient already sums over the tokens every rank in its expert-parallel group routed to
    it, and the reduction counts the group again."""
    import torch
    from torch.distributed.tensor import DTensor

    from torchtitan.distributed import utils as dist_utils

    ep = trainer.parallel_dims.ep
    experts = [p for part in trainer.model_parts for n, m in part.named_modules()
               if hasattr(m, "token_dispatcher") for p in m.parameters()]
    # Around the trainer's own wrapper of the clip, so the gradients it records are these.
    clip = dist_utils.clip_grad_norm_

    def scaled(parameters, max_norm, *args, **kwargs):
        with torch.no_grad():
            for p in experts:
                if p.grad is not None:
                    g = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
                    g.mul_(ep)
        return clip(parameters, max_norm, *args, **kwargs)

    dist_utils.clip_grad_norm_ = scaled


def _stage_clip(trainer):
    """torchtitan's `clip_grad_norm_` without its pipeline mesh: each stage's own norm."""
    clip = trainer.clip

    def stage_norm(parameters, max_norm, *args, **kwargs):
        kwargs["pp_mesh"] = None
        return clip(parameters, max_norm, *args, **kwargs)

    trainer.clip = stage_norm


def _schedule_loss(trainer, loss):
    """The pipeline schedule's loss function replaced by `loss(original, pred, labels,
    **kwargs)` (the last stage computes it, once per microbatch)."""
    schedule = getattr(trainer, "pp_schedule", None)
    if schedule is None:
        return
    original = schedule._loss_fn
    schedule._loss_fn = lambda pred, labels, **kw: loss(original, pred, labels, **kw)


def _microbatch_normalization(trainer):
    """Each microbatch's loss divided by its own count of counted tokens and by the number of
    microbatches (a mean of microbatch means), not by the global count."""
    from torchtitan.components.loss import IGNORE_INDEX

    count = trainer.num_pipeline_parallel_microbatches

    def per_microbatch(original, pred, labels, global_valid_tokens=None, **kw):
        mine = (labels != IGNORE_INDEX).sum() * count
        return original(pred, labels, global_valid_tokens=mine.to(pred.device), **kw)

    _schedule_loss(trainer, per_microbatch)


def _normalized_after_backward(trainer):
    """The schedule's backward runs on the summed loss; the loss the step returns (and logs) is
    divided by the global token count afterwards."""
    import torch

    def summed(original, pred, labels, global_valid_tokens=None, **kw):
        return original(pred, labels, global_valid_tokens=torch.ones_like(global_valid_tokens),
                        **kw)

    _schedule_loss(trainer, summed)
    if getattr(trainer, "pp_schedule", None) is None:
        return
    step = trainer.pp_forward_backward_step

    def normalized(*, global_valid_tokens, **kw):
        loss = step(global_valid_tokens=global_valid_tokens, **kw)
        return loss / global_valid_tokens if trainer.pp_has_last_stage else loss

    trainer.pp_forward_backward_step = normalized


def _local_positions(trainer):
    """The positions the model gets after the context-parallel split replaced by each row's
    column index on this rank: RoPE as if the chunk began the sequence."""
    import torch

    process = trainer.post_dataloading_process

    def local(input_dict, labels):
        inputs, labels, extra = process(input_dict, labels)
        positions = extra.get("positions")
        if positions is not None:
            mine = torch.arange(positions.shape[-1], dtype=positions.dtype,
                                device=positions.device).expand_as(positions).contiguous()
            _same_types(mine, positions)
            extra["positions"] = mine
        return inputs, labels, extra

    trainer.post_dataloading_process = local


def _same_types(tensor, source):
    """`tensor` given `source`'s SPMD types, where it has any (the spmd_types backend)."""
    try:
        import spmd_types as spmd
    except ImportError:
        return
    if spmd.has_local_type(source):
        spmd.assert_type_like(tensor, source)


def _left_out_of_checkpoint(trainer, state):
    """torchtitan's checkpointer without `state` (one of its own keys): neither saved nor
    loaded, so a resumed run keeps what it was built with."""
    trainer.checkpointer.states.pop(state, None)


def _optimizer_state_unmaterialized(trainer):
    """The optimizers' flat state dict read and loaded as torchtitan's container does, but
    without `init_optim_state` first: a fresh optimizer has no state yet, so DCP asks the
    checkpoint for none of its tensors and the load restores nothing but the hyperparameters."""
    from torchtitan.components.optimizer.utils import (
        get_flat_optim_state_dict, load_flat_optim_state_dict)

    container = trainer.optimizers

    def state_dict():
        out = {}
        for optim in container.optimizers:
            out.update(get_flat_optim_state_dict(optim))
        return out

    def load_state_dict(state):
        for optim in container.optimizers:
            load_flat_optim_state_dict(optim, state)

    container.state_dict = state_dict
    container.load_state_dict = load_state_dict
