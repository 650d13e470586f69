"""A numpy data-parallel linear model whose ranks are simulated in-process, writing its
artifacts with meshparity_hooks: the command engine's test of the helper package."""

import argparse

import numpy as np
from meshparity_hooks import Recorder

p = argparse.ArgumentParser()
p.add_argument("--dp", type=int, default=1)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--out", required=True)
p.add_argument("--bug", default="none")
# Ways not to train, for the non-vacuity tests: a learning rate of 0, a model whose output
# ignores its input (zero weights: every logit 0).
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--constant-output", action="store_true")
a = p.parse_args()

rng = np.random.default_rng(a.seed)
w = rng.normal(size=(8, 4))
if a.constant_output:
    w = np.zeros_like(w)
x, y = rng.normal(size=(16, 8)), rng.normal(size=(16, 4))
rec = Recorder(a.out)
rec.tensors("init.safetensors", {"w": w})
for step in range(1, a.steps + 1):
    loss, grad = 0.0, np.zeros_like(w)
    for rows in np.split(np.arange(len(x)), a.dp):
        err = x[rows] @ w - y[rows]
        count = len(rows) if a.bug == "local-norm" else len(x)
        loss += float((err**2).sum()) / len(x)
        grad += 2 * x[rows].T @ err / count
    rec.metric(step, loss=loss)
    if step == 1:
        rec.tensors("logits.safetensors", {"logits": x @ w, "loss": loss})
        rec.tensors("grads.safetensors", {"w": grad})
    w = w - a.lr * grad
rec.tensors("final.safetensors", {"w": w})
