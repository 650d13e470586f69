"""Bug switches (`--bug NAME`): Hugging Face users' real mistakes with transformers' own TP and
FSDP2, replayed on its distributed path. Each is code on the parallel path — a no-op at world
size 1 — and says what it replays:

    loss-per-rank-mean   each data-parallel rank's loss is the mean over its own counted
                         tokens and FSDP averages the ranks' gradients: the mean of per-rank
                         means, not the global mean — transformers' default before
                         `average_tokens_across_devices` (huggingface/transformers PR #34373;
                         the gradient-accumulation normalization of huggingface/blog PR #2414)
    kv-gather-output     the k/v projections overridden in `tp_plan` to gather their output
                         (`colwise_gather_output`) while q stays head-sharded: each rank's query
                         heads attend to the first kv heads of the whole, GQA groups mispaired
                         (NVIDIA-NeMo/Automodel PR #1324: a colwise-sharded fused projection gave
                         each rank the wrong mix of q/k/v heads; huggingface/transformers#48307)
    norm-grad-twice      the norms overridden in `tp_plan` to all-reduce their gradient
                         (`replicated_with_grad_allreduce`) where it is already whole on every
                         tp rank (no sequence parallelism): the gradient summed tp times
                         (mindspore-ai/hyper-parallel PR #77: TP=2's gradient norm 23.5 for 11.8)
    qk-norm-unreduced    Qwen3's per-head q/k norms overridden to `replicate`: the gradient of
                         each rank's heads is never summed over tp, every rank keeps its own share
                         (the all-reduce transformers' `replicated_with_grad_allreduce` exists for;
                         its own plans' norm styles fixed in huggingface/transformers PR #42448,
                         chosen by where the norm sits in PR #44668)
    clip-local-norm      `torch.nn.utils.clip_grad_norm_` over each rank's local shards: the
                         norm of the local gradients clips (pytorch#170862, DeepSpeed#7718)
    init-per-rank-seed   each rank draws the initial weights from seed + rank and loads its own
                         draw (torchtitan PR #1363's class of bug)
"""

import fnmatch

import torch.distributed as dist

from .model import ConfigError

BUGS = [
    "loss-per-rank-mean",
    "kv-gather-output",
    "norm-grad-twice",
    "qk-norm-unreduced",
    "clip-local-norm",
    "init-per-rank-seed",
]


def init_seed(bug, seed):
    if bug == "init-per-rank-seed" and dist.is_initialized():
        return seed + dist.get_rank()
    return seed


def tp_overrides(bug, config):
    """The `tp_plan` overrides (DistributedConfig's, keyed as the model's plan is) a bug makes."""
    layer = "model.layers.*."
    if bug == "kv-gather-output":
        return {layer + "self_attn.k_proj": "colwise_gather_output",
                layer + "self_attn.v_proj": "colwise_gather_output"}
    if bug == "norm-grad-twice":
        return {layer + "input_layernorm": "replicated_with_grad_allreduce",
                layer + "post_attention_layernorm": "replicated_with_grad_allreduce"}
    if bug == "qk-norm-unreduced":
        if getattr(config, "model_type", "") not in ("qwen3", "qwen3_moe"):
            raise ConfigError(f"qk-norm-unreduced is a Qwen3 bug (per-head q/k norms); this "
                              f"model is {getattr(config, 'model_type', '?')}: give the "
                              f"mutation `models = [\"qwen3*\"]` in the spec")
        return {layer + "self_attn.q_norm": "replicate", layer + "self_attn.k_norm": "replicate"}
    return {}


def check_overrides(bug, overrides, config, state_keys):
    """The overrides of `bug` this model has a module for; a bug left with none, or whose
    overrides are the model's own plan already, is refused rather than reported uncaught:
    Phi-3 fuses q/k/v into `qkv_proj` (no `k_proj` to gather), OLMo-2's plan gathers q/k/v's
    outputs itself (for its norms over the whole projection). A norm the model lacks is
    dropped: OLMo-2 has no `input_layernorm`, its `post_attention_layernorm` takes the bug."""
    if not overrides:
        return overrides
    model_type = getattr(config, "model_type", "?")
    modules = {k.rsplit(".", 1)[0] for k in state_keys}
    kept = {key: style for key, style in overrides.items()
            if any(fnmatch.fnmatch(m, key) for m in modules)}
    if not kept:
        raise ConfigError(f"{bug} overrides {', '.join(f'`{k}`' for k in overrides)}, which "
                          f"{model_type} does not have: the mistake does not exist on this "
                          f"model; give the mutation `models = [...]` in the spec so it runs "
                          f"where it does")
    plan = dict(getattr(config, "base_model_tp_plan", None) or {})
    if all(plan.get(key.removeprefix("model.")) == style for key, style in kept.items()):
        raise ConfigError(f"{bug} changes nothing on {model_type}: its own TP plan already has "
                          f"{', '.join(f'{k} = {v}' for k, v in kept.items())}; give the "
                          f"mutation `models = [...]` in the spec so it runs where it is a bug")
    return kept
