"""`Writer`: meshparity's files written collectively (gather on every rank, write on rank 0)."""

import json
import os

import torch.distributed as dist

from .. import Recorder
from .collective import _collective, _dist, _rank, agree, full
from .replicas import replica_digests


def _check_names(tensors):
    names = sorted(tensors)
    kinds = [type(tensors[n]).__name__ for n in names]
    return json.dumps([names, kinds])


class Writer:
    """meshparity's files in `out`, written collectively (see the module's text). Every method
    must be called on every rank, in the same order; only rank 0 touches the disk.

    `grad_point` names where the gradients meshparity compares are taken: `before_clip` or
    `after_clip` (default), usually from the spec through a program argument; `grads()` calls at
    the other point write nothing."""

    def __init__(self, out, grad_point="after_clip", metrics="metrics.jsonl", truncate=True):
        if grad_point not in ("before_clip", "after_clip"):
            raise ValueError(f"grad_point is before_clip or after_clip, not {grad_point!r}")
        self.out = out
        self.grad_point = grad_point
        self.rank = _rank()
        self.rec = _collective(
            "opening " + str(out),
            lambda: Recorder(out, metrics=metrics, rank=self.rank, truncate=truncate),
        )

    def metric(self, step, **values):
        """One line of metrics.jsonl; DTensor values (a clip norm) made whole first."""
        whole = {k: full(v) for k, v in values.items()}
        _collective("metric", lambda: self.rec.metric(step, **whole))

    def tensors(self, name, tensors):
        """`name` (a safetensors file) holding `tensors` made whole: {name: tensor or DTensor}."""
        tensors = dict(tensors)
        mine = _check_names(tensors)
        seen = [None] * (dist.get_world_size() if _dist() else 1)
        if _dist():
            dist.all_gather_object(seen, mine)
            if any(s != mine for s in seen):
                agree(f"{name}: the ranks hold different tensors (names or types)")
        whole = {}
        for k in sorted(tensors):
            whole[k] = _collective(f"{name}: gathering {k}", lambda k=k: full(tensors[k]))
        _collective(f"writing {name}", lambda: self.rec.tensors(name, whole))

    def grads(self, model, point, name="grads.safetensors"):
        """The parameters' gradients under their names, if `point` is the spec's grad point."""
        if point not in ("before_clip", "after_clip"):
            raise ValueError(f"point is before_clip or after_clip, not {point!r}")
        if point != self.grad_point:
            return
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        self.tensors(name, grads)

    def inputs(self, step, rows, name="inputs.jsonl"):
        """Step `step`'s line of every rank in `name`: `rows` are the token ids [rows, tokens]
        this rank trains on, whole (before a context-parallel split). Gathered, written on
        rank 0 (`meshparity_hooks.inputs`)."""
        from ..inputs import row_digests

        mine = row_digests(rows)
        seen = [mine]
        if _dist():
            seen = [None] * dist.get_world_size()
            dist.all_gather_object(seen, mine)
        ranks = dict(enumerate(seen))
        _collective(f"writing {name}", lambda: self.rec.inputs(step, ranks, name=name))

    def digests(self, model, name="digests.json"):
        """`replica_digests` of `model` written as `name` (rank 0)."""
        d = replica_digests(model)
        path = os.path.join(self.out, name)

        def write():
            if self.rank == 0:
                with open(path, "w") as f:
                    json.dump(d, f)

        _collective(f"writing {name}", write)
        return d
