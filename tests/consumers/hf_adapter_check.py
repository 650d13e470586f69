"""The HF adapter's decisions for architectures it was not written against, without running
them: tracer layouts from each resolved TP plan, bug switches refused where they change
nothing, configs in the spec's shape that transformers accepts. Prints `ok`."""

import types

import torch

from meshparity_hooks.hf import bugs, layout, model
from meshparity_hooks.hf.model import ConfigError


def run(architecture, **kw):
    r = types.SimpleNamespace(config="", architecture=architecture, layers=1, hidden=32, heads=4,
                              kv_heads=2, ffn=64, vocab=96, seq=16, tie_embeddings=False,
                              experts=4, top_k=2, tp=2)
    r.__dict__.update(kw)
    return r


def built(architecture, **kw):
    config = model.config_of(run(architecture, **kw))
    torch.manual_seed(0)
    return config, model.model_class(config)._from_config(config, dtype=torch.float32)


def refused(call, words):
    try:
        call()
    except ConfigError as e:
        assert words in str(e), (words, str(e))
        return
    raise AssertionError(f"not refused: {words}")


def main():
    # Activations between a colwise and a rowwise projection act on the shard, whatever their
    # names; after a gathered projection (Phi-3's fused gate_up) they are whole.
    for arch, site, want in [("llama", "mlp.act_fn", "shard:-1"),
                             ("starcoder2", "mlp.act", "shard:-1"),
                             ("phi3", "mlp.activation_fn", "replicate")]:
        _, m = built(arch)
        got = layout.layouts(m, 2)[0].get(f"model.layers.0.{site}")
        assert got == want, (arch, site, got)
    # A MoE's experts compute on dispatch-ordered rows: untraced at every world size.
    _, m = built("qwen3_moe")
    for tp in (1, 2):
        assert "model.layers.0.mlp.experts.act_fn" in layout.layouts(m, tp)[1], tp
    # Bug switches: one with no module of the model to act on, or only the plan's own style
    # already, is refused; a norm the model lacks is dropped from the ones that take the bug.
    for arch, bug, words in [("olmo2", "kv-gather-output", "changes nothing on olmo2"),
                             ("phi3", "kv-gather-output", "which phi3 does not have")]:
        config, m = built(arch)
        overrides = bugs.tp_overrides(bug, config)
        refused(lambda: bugs.check_overrides(bug, overrides, config, m.state_dict()), words)
    config, m = built("olmo2")
    kept = bugs.check_overrides("norm-grad-twice", bugs.tp_overrides("norm-grad-twice", config),
                                config, m.state_dict())
    assert list(kept) == ["model.layers.*.post_attention_layernorm"], kept
    config, m = built("llama")
    for bug in ("kv-gather-output", "norm-grad-twice"):
        want = bugs.tp_overrides(bug, config)
        assert bugs.check_overrides(bug, want, config, m.state_dict()) == want, bug
    # Configs: special tokens outside the spec's vocabulary dropped, every dropout off, heads
    # that do not split over tp refused before the first forward.
    config = model.config_of(run("phi3"))
    assert config.pad_token_id is None and config.resid_pdrop == 0.0, config
    refused(lambda: model.config_of(run("gemma", kv_heads=1)), "1 key/value heads do not split")
    print("ok")


if __name__ == "__main__":
    main()
