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
    `modules`: globs of module names to hook (default: every module with no children)."""

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

    def _whole(self, name, x):
        x = _settle(x)
        rows_whole = False
        if _is_dtensor(x):
            rows_whole = self.dp in (x.device_mesh.mesh_dim_names or ())
            x = x.full_tensor()
        elif self.mesh is not None and self.tp in (self.mesh.mesh_dim_names or ()):
            layout = next((v for g, v in self.layouts.items() if fnmatch.fnmatch(name, g)),
                          "replicate")
            if layout.startswith("shard:"):
                x = _gather(x, self.mesh[self.tp].get_group(), int(layout.split(":")[1]))
            elif layout != "replicate":
                raise ValueError(f"layout of {name}: shard:D or replicate, not {layout!r}")
        batch_valued = not (name.startswith("grad.") or name in self.scalars or rows_whole)
        if batch_valued and self.mesh is not None and self.dp in (self.mesh.mesh_dim_names or ()):
            x = _gather(x, self.mesh[self.dp].get_group(), 0)
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
