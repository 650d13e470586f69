"""`Tracer`: per-site traces for localization, by module hooks, in world-size-1 shapes."""

import fnmatch
import os

import torch

from .. import to_numpy
from .collective import _collective, _gather, _is_dtensor, _rank, _settle


class Tracer:
    """Per-site traces for localization, written into `trace_dir` (meshparity's `{{trace_dir}}`;
    empty or None: nothing is traced and the hooks cost nothing).

    Forward hooks record every named module's output (site: the module's name), tensor hooks on
    those outputs the gradient arriving at it (`NAME.bwd.in`), and `grads()` the finalized
    parameter gradients (`grad.NAME`). At `end()` every value is made world-size-1 shaped:
    DTensors by `full_tensor()`, plain local tensors by their `layouts` entry (a glob on the
    site name → `"shard:D"`: concatenated along dim D over the mesh's `tp` dim; `"replicate"`,
    the default: the local copy), then the batch rows of the `dp` mesh dim concatenated along
    dim 0. Writes `sites.txt` (the first traced step's order) and `step{N}.safetensors`.

    `steps`: the 0-based step indices to trace (meshparity's traces are of the first steps);
    `modules`: globs of module names to hook (default: every module with no children).

    `tp` and `dp` say which ranks split a value, by the program's own names: a dim name of
    `mesh` (torchtitan's `dp_shard`, `fsdp`), a tuple of them (`("dp_replicate", "dp_shard")`:
    the rows are split over both), a 1-D DeviceMesh, or a process group — so no 2-D (dp, tp)
    submesh is needed (torchtitan has none when dp = 1) and `mesh` only where names are used."""

    def __init__(self, model, trace_dir, mesh=None, steps=(0, 1), modules=None, layouts=None,
                 tp="tp", dp="dp"):
        self.dir = trace_dir or None
        self.mesh, self.tp, self.dp = mesh, tp, dp
        self.steps = set(steps)
        self.layouts = layouts or {}
        self.step = None
        self.values = {}
        self.scalars = set()
        self.order = None
        self.handles = []
        if self.dir is None:
            return
        if _rank() == 0:
            os.makedirs(self.dir, exist_ok=True)
        for name, m in model.named_modules():
            if not name:
                continue
            leaf = not any(True for _ in m.children())
            wanted = any(fnmatch.fnmatch(name, g) for g in modules) if modules else leaf
            if wanted:
                self.handles.append(m.register_forward_hook(self._forward(name)))

    def _active(self):
        return self.dir is not None and self.step is not None

    def _forward(self, name):
        def hook(_module, _inputs, output):
            if not self._active():
                return
            out = output[0] if isinstance(output, (tuple, list)) else output
            if not isinstance(out, torch.Tensor):
                return
            self.values[name] = out.detach().clone()
            if out.requires_grad:
                def grad_hook(g, name=name):
                    if self._active():
                        self.values[f"{name}.bwd.in"] = g.detach().clone()
                out.register_hook(grad_hook)
        return hook

    def begin(self, step):
        """Start step `step` (0-based): traced if meshparity asked for it."""
        self.values = {}
        self.scalars = set()
        self.step = step if step in self.steps else None

    def grads(self, model):
        """Record the finalized gradients (after DP reduction) as `grad.NAME`."""
        if self._active():
            for n, p in model.named_parameters():
                if p.grad is not None:
                    self.values[f"grad.{n}"] = p.grad.detach().clone()

    def value(self, name, x):
        """Record a value of this step under `name` (a scalar such as the gradient norm, which
        no module outputs): a replicated or DTensor value, not batch-valued. Name it
        `grad_norm` and localization reads it as the norm before clipping."""
        if self._active():
            t = x if isinstance(x, torch.Tensor) else torch.tensor(float(x))
            self.values[name] = t.detach().clone()
            self.scalars.add(name)

    def _names(self, which):
        """The mesh dim names `which` gives (a name or a tuple of them), else ()."""
        if isinstance(which, str):
            return (which,)
        if isinstance(which, tuple) and all(isinstance(n, str) for n in which):
            return which
        return ()

    def _group(self, which):
        """The process group of the ranks `which` names, or None when this run has none."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import DeviceMesh

        if which is None:
            return None
        if isinstance(which, DeviceMesh):
            return which.get_group() if which.ndim == 1 else which._flatten().get_group()
        names = self._names(which)
        if not names:
            return which  # a process group
        present = set(self.mesh.mesh_dim_names or ()) if self.mesh is not None else set()
        names = tuple(n for n in names if n in present)
        if not names:
            return None
        sub = self.mesh[names] if len(names) > 1 else self.mesh[names[0]]
        group = sub.get_group() if len(names) == 1 else sub._flatten().get_group()
        return group if dist.get_world_size(group) > 1 else None

    def _whole(self, name, x):
        x = _settle(x)
        rows_whole = False
        if _is_dtensor(x):
            dims = set(x.device_mesh.mesh_dim_names or ())
            rows_whole = bool(dims & set(self._names(self.dp)))
            x = x.full_tensor()
        else:
            tp = self._group(self.tp)
            layout = next((v for g, v in self.layouts.items() if fnmatch.fnmatch(name, g)),
                          "replicate")
            if layout.startswith("shard:"):
                if tp is not None:
                    x = _gather(x, tp, int(layout.split(":")[1]))
            elif layout != "replicate":
                raise ValueError(f"layout of {name}: shard:D or replicate, not {layout!r}")
        batch_valued = not (name.startswith("grad.") or name in self.scalars or rows_whole)
        dp = self._group(self.dp) if batch_valued else None
        if dp is not None:
            x = _gather(x, dp, 0)
        return x.cpu()

    def end(self):
        """Make this step's values whole (collective) and write them (rank 0)."""
        if not self._active():
            return
        names = list(self.values)
        fwd = [n for n in names if ".bwd." not in n and not n.startswith("grad.")]
        fwd = [n for n in fwd if n not in self.scalars]
        bwd = [n for n in names if ".bwd." in n]
        grads = [n for n in names if n.startswith("grad.")]
        order = fwd + bwd + grads + [n for n in names if n in self.scalars]
        whole = {n: _collective(f"trace {n}", lambda n=n: self._whole(n, self.values[n]))
                 for n in order}
        if self.order is None:
            self.order = order

        def write():
            if _rank() != 0:
                return
            from safetensors.numpy import save_file
            arrays = {}
            for n in order:
                a = to_numpy(whole[n])
                arrays[n] = a.reshape(1) if a.ndim == 0 else a
            save_file(arrays, os.path.join(self.dir, f"step{self.step}.safetensors"))
            with open(os.path.join(self.dir, "sites.txt"), "w") as f:
                f.write("\n".join(self.order) + "\n")

        _collective(f"writing trace step {self.step}", write)
        self.values = {}
        self.step = None

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
