"""The user's architecture, with world size 1's initial weights, loaded the way transformers
distributes it.

- **The config**: the user's own (`--config`: a `config.json`, or a directory holding one: their
  checkpoint), else one built from the spec's model (`--architecture llama|qwen3|qwen3_moe|...`,
  any `model_type` transformers knows, with the spec's layers, hidden size, heads, kv heads, ffn,
  vocabulary and tied embeddings). Dropout is off (the spec's dropout streams are the built-in
  engine's); the attention is `sdpa` at every world size.
- **The initial weights**: the user's checkpoint when the directory holds one, else drawn at
  world size 1 from the run's seed by the model's own `_init_weights` (`from_config`). Every rank
  draws the whole model (or reads the checkpoint) and hands its state dict to
  `from_pretrained(None, state_dict=…, distributed_config=…)`: transformers' own loading path,
  which applies the model's TP plan and FSDP plan and puts each rank's part of every weight in
  its shard. (`from_config` takes no `distributed_config`.)
- **The mesh**: `DistributedConfig(tp_size, fsdp_size, dp_replicate_size)` from meshparity's
  dp·tp (ZeRO-3 = FSDP2; `shard` < dp = HSDP). transformers' mesh is (pp, dp_replicate, fsdp,
  tp), tp fastest: a rank's world index is its data-parallel index × tp + its tp index, the order
  the torch hooks' Tracer checks before it writes copies.
"""

import json
import os

import torch

ARCHITECTURE_KEYS = {
    # meshparity's model keys -> transformers' config keys
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "ffn": "intermediate_size",
    "vocab": "vocab_size",
}


class ConfigError(ValueError):
    """The user's config or architecture cannot be used (says which and why)."""


def config_of(run):
    """The transformers config this run trains: the user's, or the spec's shape in the named
    architecture."""
    from transformers import AutoConfig, CONFIG_MAPPING

    if run.config:
        path = run.config
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        if not os.path.isfile(path):
            raise ConfigError(f"--config {run.config}: no config.json there (a transformers "
                              f"config file, or a checkpoint directory holding one)")
        with open(path) as f:
            d = json.load(f)
        if "model_type" not in d:
            raise ConfigError(f"{path}: no `model_type` (transformers cannot tell the architecture)")
        config = AutoConfig.for_model(**d)
    else:
        if run.architecture not in CONFIG_MAPPING:
            known = ", ".join(sorted(k for k in CONFIG_MAPPING if "llama" in k or "qwen" in k))
            raise ConfigError(f"--architecture {run.architecture}: not a model_type transformers "
                              f"knows (e.g. {known})")
        shape = {v: getattr(run, k) for k, v in ARCHITECTURE_KEYS.items()}
        if shape["num_attention_heads"] and shape["hidden_size"] % shape["num_attention_heads"]:
            raise ConfigError(f"hidden {run.hidden} does not split into {run.heads} heads")
        extra = {"head_dim": run.hidden // run.heads}
        if "moe" in run.architecture:
            extra.update(num_experts=run.experts, num_experts_per_tok=run.top_k,
                         moe_intermediate_size=run.ffn, decoder_sparse_step=1,
                         norm_topk_prob=True)
        config = CONFIG_MAPPING[run.architecture](
            **shape, **extra, tie_word_embeddings=run.tie_embeddings,
            max_position_embeddings=max(64, run.seq), rms_norm_eps=1e-6)
        # An architecture's default special tokens are ids of its own vocabulary (Phi-3's pad
        # id 32000): outside the spec's, its embedding refuses the padding index. Nothing here
        # pads or stops on them, so they are dropped.
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
            ids = getattr(config, key, None)
            if ids is not None and any(i >= run.vocab for i in (ids if isinstance(ids, list)
                                                                 else [ids])):
                setattr(config, key, None)
    # Every dropout probability, whatever the architecture calls it (`attention_dropout`,
    # Phi-3's `resid_pdrop`, StarCoder2's `residual_dropout`): the spec's dropout streams are
    # the built-in engine's.
    for key, value in config.to_dict().items():
        if isinstance(value, float) and ("dropout" in key or key.endswith("pdrop")):
            setattr(config, key, 0.0)
    config._attn_implementation = "sdpa"
    _heads_split(config, run.tp)
    return config


def _heads_split(config, tp):
    """transformers' TP plans shard q/k/v by heads: a count that does not divide by tp fails
    deep in the first forward (a reshape of half a head); say which and why before it."""
    if tp <= 1:
        return
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    for what, n in (("attention heads", heads), ("key/value heads", kv)):
        if n and n % tp:
            raise ConfigError(f"{config.model_type}: {n} {what} do not split over tp {tp} "
                              f"(transformers' TP plan shards q/k/v projections by heads); "
                              f"use a tp that divides {n}, or more heads")


def model_class(config):
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except KeyError:
        raise ConfigError(f"{config.model_type}: transformers has no causal LM for it") from None


def initial_state(run, config, seed):
    """World size 1's initial weights, {state-dict key: tensor} in f32: the user's checkpoint
    when `--config` is a directory holding weights, else drawn from `seed`."""
    cls = model_class(config)
    directory = run.config if run.config and os.path.isdir(run.config) else None
    if directory and any(f.endswith(".safetensors") for f in os.listdir(directory)):
        model = cls.from_pretrained(directory, config=config, dtype=torch.float32)
    else:
        torch.manual_seed(seed)
        model = cls._from_config(config, dtype=torch.float32)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def distributed_config(run):
    """transformers' DistributedConfig for meshparity's mesh, or None at world size 1."""
    from transformers.distributed import DistributedConfig

    unsupported = [f"{k} = {getattr(run, k)}" for k in ("pp", "cp", "ep") if getattr(run, k) > 1]
    if run.sp:
        unsupported.append("sp = true (transformers: `enable_sequence_parallel` is not wired up)")
    if unsupported:
        raise ConfigError("meshparity_hooks.hf: transformers' distributed path is adapted for "
                          "dp (FSDP2) and tp; not " + ", ".join(unsupported))
    if run.dp > 1 and run.zero != 3:
        raise ConfigError(
            f"dp = {run.dp} with zero = {run.zero}: transformers' data parallelism is FSDP2, "
            f"which shards parameters, gradients and optimizer state; give the mesh zero = 3")
    if run.dp * run.tp == 1:
        return None
    shard = run.shard or run.dp
    if run.dp % shard:
        raise ConfigError(f"shard = {shard} does not divide dp = {run.dp}")
    return DistributedConfig(tp_size=run.tp, fsdp_size=shard, dp_replicate_size=run.dp // shard,
                             tp_plan=run.tp_overrides or None)


def load(run, config, state, dtype):
    """The model as transformers distributes it on this rank, holding `state`."""
    cls = model_class(config)
    return cls.from_pretrained(None, config=config, state_dict=state,
                               distributed_config=distributed_config(run), dtype=dtype)


def save_distributed(model, directory):
    """transformers' own `save_pretrained(directory, distributed_checkpoint=True)`.

    One adaptation, for a model with tied embeddings: transformers (5.24) hands DCP's
    safetensors writer the model state dict, where `lm_head.weight` and
    `model.embed_tokens.weight` are one tensor under two names; DCP clones a rank's shard
    only when it is a view of a larger storage, so where the shard owns its storage (bf16 on
    tp2 and fsdp2 here) safetensors refuses the pair ("Some tensors share memory") and the save
    fails on every rank — the bug Megatron-Bridge #919 hit and fixed (#922) by cloning the
    second name. The state dict DCP is given here has the same clone; every other step
    (transformers' redistribution, its storage writer, its files) is transformers' own."""
    if not getattr(model.config, "tie_word_embeddings", False):
        model.save_pretrained(directory, distributed_checkpoint=True)
        return
    import torch.distributed.checkpoint.state_dict as state_dicts

    own = state_dicts.get_model_state_dict

    def distinct(*args, **kwargs):
        state, seen = own(*args, **kwargs), set()
        for key, value in state.items():
            local = value.to_local() if hasattr(value, "to_local") else value
            storage = local.untyped_storage().data_ptr()
            if storage in seen:
                state[key] = value.clone()
            seen.add(storage)
        return state

    state_dicts.get_model_state_dict = distinct
    try:
        model.save_pretrained(directory, distributed_checkpoint=True)
    finally:
        state_dicts.get_model_state_dict = own
