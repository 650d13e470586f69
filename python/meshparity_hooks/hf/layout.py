"""Tracer layouts from the TP plan transformers resolved, for the sites it does not name too.

A module's output under HF tensor parallelism is a plain local tensor (its styles hand
`to_local()` on), so the tracer must be told how each site's output splits over tp:

- `colwise` (Shard(-1) out): the last dimension is split — `shard:-1`;
- `rowwise`, `colwise_gather_output`, `embedding_rowwise`, … (Replicate out): the local copy is
  the whole — `replicate`;
- sites whose output the plan does not set but that compute on a sharded value: `mlp.act_fn`
  takes `gate_proj`'s shard (`shard:-1`), as any parameterless leaf between a colwise and a
  rowwise sibling does (StarCoder2's `mlp.act` between `c_fc` and `c_proj`); Qwen3's
  `q_norm`/`k_norm` (planned `replicated_with_grad_allreduce`, a style of the parameter's
  gradient) normalize this rank's heads of `q_proj`/`k_proj` (`[B, S, heads, head_dim]`:
  `shard:-2`);
- `rotary_emb`: the same (cos, sin) on every rank for the one position row every layout uses —
  `global` (neither tp-split nor batch rows to concatenate over dp).

A style this table does not know makes its site untraced rather than traced wrong, and so are
the leaves inside a MoE's `experts` (Qwen3-MoE's, Mixtral's `experts.act_fn`): they compute on
the tokens in dispatch order, grouped by expert, so a rank's rows are not a slice of world size
1's and no concatenation over dp restores them (traced, a correct fsdp2 run's first divergence
was named there). At every world size, so the reference and the mesh trace the same sites.
"""

import fnmatch

SHARDED_OUT = {"colwise": "shard:-1", "packed_colwise": "shard:-1"}
REPLICATED_OUT = {"rowwise", "colwise_gather_output", "colwise_rep", "rowwise_rep",
                  "rowwise_split_input", "embedding_rowwise", "embedding_colwise", "all_reduce"}
# Styles that set how a parameter is held and its gradient reduced, not how the output splits:
# a module under one computes on what it is given (Qwen3's q/k norms on this rank's heads).
PARAMETER_ONLY = {"replicated_with_grad_allreduce", "replicate"}
# Unnamed sites whose output is split as a named site's is: (site suffix, source suffix, layout
# of the site when the source is colwise).
FOLLOWS = [
    ("mlp.act_fn", "mlp.gate_proj", "shard:-1"),
    ("self_attn.q_norm", "self_attn.q_proj", "shard:-2"),
    ("self_attn.k_norm", "self_attn.k_proj", "shard:-2"),
]


def _style(plan, site):
    """The plan's style for module `site` (its keys are globs with `*` for layer numbers)."""
    for key, style in plan.items():
        if fnmatch.fnmatch(site, key):
            return style
    return None


def _between_split_projections(plan, model, name, module):
    """Whether `module` holds no parameters and sits beside a projection whose output is split
    over tp (colwise) and one that takes a split input (rowwise): the MLP's activation, between
    its up and down projections, whatever the architecture names them."""
    if any(True for _ in module.parameters(recurse=False)) or "." not in name:
        return False
    parent = name.rsplit(".", 1)[0]
    siblings = [f"{parent}.{n}" for n, _ in model.get_submodule(parent).named_children()]
    styles = {_style(plan, s) for s in siblings}
    return bool(styles & set(SHARDED_OUT)) and bool(styles & {"rowwise"})


def layouts(model, tp):
    """(layouts, untraced): the Tracer's `layouts` ({site: layout}) for every leaf module of
    `model` under `tp` ranks, and the sites whose layout is unknown (left untraced)."""
    plan = dict(getattr(model, "tp_plan", None) or {}) if tp > 1 else {}
    out, untraced = {}, []
    for name, m in model.named_modules():
        if not name or any(True for _ in m.children()):
            continue
        if name.endswith("rotary_emb"):
            out[name] = "global"
            continue
        if ".experts." in name:
            untraced.append(name)
            continue
        if tp == 1:
            continue
        style = _style(plan, name)
        follow = next((f for f in FOLLOWS if name.endswith(f[0])), None)
        if style is None and follow is None and _between_split_projections(plan, model, name, m):
            # An activation between a column-split and a row-split projection (StarCoder2's
            # `mlp.act` after `c_fc`, any MLP's whatever its names): it acts on the shard.
            out[name] = "shard:-1"
        elif style in SHARDED_OUT:
            out[name] = SHARDED_OUT[style]
        elif style in PARAMETER_ONLY | {None} and follow is not None:
            # The style is about the parameter (its gradient's all-reduce); the output is split
            # as the value it normalizes or activates is.
            suffix, source_suffix, layout = follow
            source = name[: -len(suffix)] + source_suffix
            out[name] = layout if _style(plan, source) in SHARDED_OUT else "replicate"
        elif style in REPLICATED_OUT | PARAMETER_ONLY or style is None:
            out[name] = "replicate"
        else:
            untraced.append(name)
    # The gradient arriving at an output is laid out as the output is.
    out.update({f"{name}.bwd.in": lay for name, lay in list(out.items())})
    return out, untraced
