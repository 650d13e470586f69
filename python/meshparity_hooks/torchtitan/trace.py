"""Per-site traces of torchtitan's own training, for localization (`--trace-dir`).

What is traced, each made world size 1's shape by the same rules as the files (layout.py):

- step 0's forward: every leaf module's output, from the forward pass the logits are written
  from (the model as it trains, under SPMD type checking on the spmd_types backend, so each
  output's layout is read where it is made). An output whose layout nothing declares and
  whose copies differ across the tensor-parallel ranks (a plain local tensor of torchtitan's
  DTensor path: ColwiseParallel hands on `to_local()`) is left out, never written as whole.
- each traced step's gradients, finalized (after FSDP's and TP's reductions) and before
  clipping, as `grad.NAME`; a gradient replicated over the TP ranks (a norm's weight) as each
  TP rank's copy, so a rank that kept its own share is seen as such;
- each step's gradient norm as torchtitan's `clip_grad_norm_` returned it, every rank's copy
  (under pipelining each stage's).

Under pipelining every stage's sites are listed in the pipeline's order; under context
parallelism each output's columns are put back in sequence order (chunks.py), and an output
whose columns are not the sequence's is left out.

A mixture of experts' routed region (a module with a `token_dispatcher`: dispatch, the experts,
combine) is traced as a whole too, its output back in token order. Inside it the experts see
the tokens routed to them, sorted by expert: a rank's own tokens sorted (data or context
parallelism), or every rank's tokens routed to its own experts (expert parallelism) — rows in
an order and number world size 1 never has. So on more than one rank those sites are left out
and the region's combined output stands for them.
"""

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from ..torch import Tracer
from ..torch.collective import full
from . import chunks, stages
from .layout import _same_everywhere, spmd_layout, whole


# Why a site is left out (the site list's `!NAME: why`).
DISPATCHED = ("inside a routed region: the experts' rows are tokens sorted by expert (a rank's "
              "own, or its experts' from every rank), an order world size 1 never has; the "
              "region's output stands for them")
NOT_SEQUENCE = ("under context parallelism its columns are not the sequence's, so they cannot be "
                "put back in order")
UNDECLARED = ("a plain per-rank tensor whose layout nothing declares and whose copies differ "
              "across the tensor-parallel ranks")


class _Captured:
    """A traced output and the SPMD types it had when it was made."""

    def __init__(self, tensor, layout):
        self.tensor, self.layout = tensor, layout


class TitanTracer(Tracer):
    """`Tracer` over torchtitan's model parts and ParallelDims (see the module's text)."""

    def __init__(self, trainer, trace_dir, canonical):
        pd = trainer.parallel_dims
        tp = pd.get_optional_mesh("tp") if pd.tp_enabled else None
        dp = pd.get_optional_mesh("batch") if pd.dp_enabled else None
        self.pd = pd
        self.canonical = canonical
        self.capturing = False
        # On more than one rank: the routed regions, whose insides see dispatched tokens.
        self.dispatched = []
        self.position = {}
        # Context parallelism: the logits' pass's positions put each output's columns in order.
        self.seq = trainer.run.seq
        self.positions = None
        # The base class hooks no module (an empty one): the model parts' leaves are hooked
        # below, under their canonical names, and record only in the logits' pass.
        super().__init__(torch.nn.Module(), trace_dir, tp=tp, dp=dp)
        if self.dir is None:
            return
        # Pipelining: each rank holds its stages' sites; ordered as world size 1's model is.
        self.stages = stages.group(pd)
        if self.stages is not None:
            self.stage_order(trainer)
        for part in trainer.model_parts:
            for name, m in part.named_modules():
                leaf = name and not any(True for _ in m.children())
                routed = name and hasattr(m, "token_dispatcher")
                if routed and dist.is_initialized() and dist.get_world_size() > 1:
                    self.dispatched.append(canonical(name) + ".")
                if leaf or routed:
                    self.handles.append(m.register_forward_hook(self._capture(canonical(name))))

    def _capture(self, name):
        def hook(_module, _inputs, output):
            if not (self._active() and self.capturing):
                return
            out = output[0] if isinstance(output, (tuple, list)) else output
            if isinstance(out, torch.Tensor):
                self.values[name] = _Captured(out, spmd_layout(out))
        return hook

    def stage_order(self, trainer):
        """Pipelining: each site's stage (its module's or parameter's), so the stages' sites
        come in the pipeline's order and each stage's in the order its rank met them."""
        held = [None] * dist.get_world_size()
        mine = {}
        for index, part in stages.indexed(trainer):
            for n, _ in part.named_modules():
                mine[self.canonical(n)] = index
            for n, _ in part.named_parameters():
                mine[f"grad.{self.canonical(n)}"] = index
        dist.all_gather_object(held, mine)
        self.position = {n: i for part in held for n, i in part.items()}

    def site_key(self, name):
        base = name[:-len(".bwd.in")] if name.endswith(".bwd.in") else name
        return self.position.get(base, len(self.position))

    def forward_pass(self):
        """A context in which the leaf modules' outputs are recorded (the logits' pass)."""
        tracer = self

        class Capturing:
            def __enter__(self):
                tracer.capturing = True

            def __exit__(self, *exc):
                tracer.capturing = False

        return Capturing()

    def gradients(self, parameters):
        """The finalized gradients of `parameters` ((canonical name, parameter) pairs)."""
        if self._active():
            for name, p in parameters:
                if p.grad is not None:
                    self.values[f"grad.{name}"] = p.grad.detach().clone()

    def _copies(self, name, x):
        """Under pipelining a value (the gradient norm) is written as each stage's copy (`@pp`):
        a norm each stage took over its own parameters alone then shows as such. Otherwise the
        base class's copies over dp and tp."""
        if self.stages is None or name not in self.scalars:
            return super()._copies(name, x)
        mine = full(x).reshape(-1)
        parts = [torch.empty_like(mine) for _ in range(dist.get_world_size(self.stages))]
        dist.all_gather(parts, mine, group=self.stages)
        return parts, ("pp",)

    def _whole(self, name, x):
        if isinstance(x, _Captured):
            out = whole(name, x.tensor, self.pd, layout=x.layout)
            return chunks.in_order(self.pd, out, self.positions, self.seq)
        batch_valued = not (name.startswith("grad.") or name in self.scalars)
        return whole(name, x, self.pd, batch_valued=batch_valued)

    def end(self):
        """Outputs of unknown layout left out (every rank agrees which), then `Tracer.end`."""
        if self._active():
            self._drop_unknown()
        super().end()

    def _sequence_first(self, x):
        """Under context parallelism, whether `x`'s columns (dim 1) are the sequence's, one
        rank's chunks or all of them — the only layout whose chunks can be put back in order."""
        cp = chunks.group(self.pd)
        if cp is None:
            return True
        local = x.to_local() if isinstance(x, DTensor) else x
        return local.dim() >= 2 and local.shape[1] in (self.seq,
                                                       self.seq // dist.get_world_size(cp))

    def _drop_unknown(self):
        """Captured outputs whose layout is unknown: dropped on every rank, each with why
        (`left_out`, written to the site list), the rest detached."""
        unknown = {}
        for name, v in list(self.values.items()):
            if not isinstance(v, _Captured):
                continue
            if name.startswith(tuple(self.dispatched)):
                unknown[name] = DISPATCHED
            elif not self._sequence_first(v.tensor):
                unknown[name] = NOT_SEQUENCE
            elif v.layout is None and not isinstance(v.tensor, DTensor) \
                    and not _same_on_tp(v.tensor, self.pd):
                unknown[name] = UNDECLARED
        if dist.is_initialized():
            seen = [None] * dist.get_world_size()
            dist.all_gather_object(seen, unknown)
            unknown = {n: why for s in seen for n, why in s.items()}
        for name, why in unknown.items():
            self.values.pop(name, None)
            self.left_out[name] = why


def _same_on_tp(x, pd):
    """Whether every tensor-parallel rank holds the same `x` (a replicated plain tensor)."""
    if not pd.tp_enabled:
        return True
    return _same_everywhere(x.detach(), pd.get_optional_mesh("tp").get_group())

