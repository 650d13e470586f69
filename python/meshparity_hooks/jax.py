"""meshparity_hooks.torch's API where it applies to a JAX program (one process, many devices).

    from meshparity_hooks.jax import Writer, Tracer, replica_digests, dropout_mask
    w = Writer(args.out, grad_point=args.grad_point)
    tracer = Tracer(args.trace_dir, steps=(0, 1))
    for step in range(1, steps + 1):
        tracer.begin(step - 1)
        params, loss, grads, sites = train_step(params, batch(step))
        tracer.values(sites)                       # {name: global array}, in compute order
        tracer.grads(grads)                        # grad.NAME
        tracer.end()
        w.grads(grads, "before_clip")              # written if the spec's point says so
        w.metric(step, loss=loss, grad_norm=norm)
    w.digests(params)                              # replicas' agreement, checked by meshparity
    w.tensors("final.safetensors", params)

What differs from torch and why: a `jax.Array` is global — `np.asarray` of a sharded array is
the world-size-1 value, gathered by JAX — so nothing needs a collective and a write cannot
leave other ranks waiting; JAX has no module hooks, so the program names the values it traces
(`Tracer.values`). Replica digests read each device's own copy (`addressable_shards`): devices
holding the same index of an array must hold the same bytes, which `np.asarray` (it reads one
copy per index) never checks.
"""

import hashlib
import json
import os

import numpy as np

from . import Recorder, to_numpy

__all__ = ["Writer", "Tracer", "replica_digests", "dropout_mask"]


class Writer:
    """meshparity's files in `out` (process 0 writes), with torch's `Writer` methods."""

    def __init__(self, out, grad_point="after_clip", metrics="metrics.jsonl"):
        if grad_point not in ("before_clip", "after_clip"):
            raise ValueError(f"grad_point is before_clip or after_clip, not {grad_point!r}")
        self.out = out
        self.grad_point = grad_point
        self.rec = Recorder(out, metrics=metrics)

    def metric(self, step, **values):
        self.rec.metric(step, **values)

    def tensors(self, name, tensors):
        self.rec.tensors(name, tensors)

    def grads(self, grads, point, name="grads.safetensors"):
        """`grads` ({name: array}) as `name`, if `point` is the spec's grad point."""
        if point not in ("before_clip", "after_clip"):
            raise ValueError(f"point is before_clip or after_clip, not {point!r}")
        if point == self.grad_point:
            self.rec.tensors(name, grads)

    def digests(self, params, name="digests.json"):
        """`replica_digests` of `params` written as `name`."""
        d = replica_digests(params)
        if self.rec.writer:
            with open(os.path.join(self.out, name), "w") as f:
                json.dump(d, f)
        return d


def _index_key(index):
    return ",".join(f"{s.start}:{s.stop}" if isinstance(s, slice) else str(s) for s in index)


def replica_digests(params):
    """For every array of `params` ({name: jax.Array}), each device's hash and norm of the
    shard it holds, grouped by the shard's index: devices holding the same index must hold the
    same bytes (meshparity_hooks.torch's format; map it as `artifacts.digests`)."""
    groups = {}
    for name, a in params.items():
        for shard in a.addressable_shards:
            key = f"{name}|{_index_key(shard.index)}"
            data = np.asarray(shard.data)
            h = hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()[:16]
            g = groups.setdefault(
                key, {"param": name, "group": key, "ranks": [], "digests": [], "norms": []}
            )
            g["ranks"].append(int(shard.device.id))
            g["digests"].append(h)
            g["norms"].append(float(np.linalg.norm(data.astype(np.float64).ravel())))
    world = len({r for g in groups.values() for r in g["ranks"]})
    return {"version": 1, "world_size": world, "groups": list(groups.values())}


class Tracer:
    """Per-site traces for localization in `trace_dir` (`{{trace_dir}}`; empty: nothing).
    The program hands each traced step's values by name, in the order it computed them;
    `end()` writes `sites.txt` (the first traced step's order) and `step{N}.safetensors`."""

    def __init__(self, trace_dir, steps=(0, 1)):
        self.dir = trace_dir or None
        self.steps = set(steps)
        self.step = None
        self.names = []
        self.arrays = {}
        self.order = None
        if self.dir:
            os.makedirs(self.dir, exist_ok=True)

    def begin(self, step):
        self.step = step if (self.dir and step in self.steps) else None
        self.names, self.arrays = [], {}

    def values(self, values):
        """Forward (or `.bwd.`) values of this step: {name: array}, whole-batch."""
        if self.step is None:
            return
        for n, v in values.items():
            self.names.append(n)
            self.arrays[n] = to_numpy(v)

    def grads(self, grads):
        """The finalized gradients, as `grad.NAME`."""
        self.values({f"grad.{n}": g for n, g in grads.items()})

    def end(self):
        if self.step is None:
            return
        from safetensors.numpy import save_file

        if self.order is None:
            self.order = list(self.names)
            with open(os.path.join(self.dir, "sites.txt"), "w") as f:
                f.write("\n".join(self.order) + "\n")
        arrays = {n: (a.reshape(1) if a.ndim == 0 else a) for n, a in self.arrays.items()}
        save_file(arrays, os.path.join(self.dir, f"step{self.step}.safetensors"))
        self.step = None


def dropout_mask(seed, step, site, shape, p, index=None):
    """A keep-mask (1/(1-p) kept, 0 dropped) over the world-size-1 `shape`, drawn from
    (seed, step, site) alone, cut to `index`: every device drops what world size 1 drops at
    its positions. numpy, so it is the same draw inside or outside `jit` (pass it in)."""
    key = int.from_bytes(hashlib.sha256(f"{seed}/{step}/{site}".encode()).digest()[:8], "little")
    rng = np.random.default_rng(key)
    keep = (rng.random(shape) >= p).astype(np.float32) / np.float32(1.0 - p)
    return keep[index] if index is not None else keep
