#!/usr/bin/env python3
"""A small JAX trainer with Megatron-style tensor parallelism and data parallelism.

It knows nothing of meshparity: it takes its layout as flags, trains a residual MLP language
model for a few SGD steps on synthetic tokens and writes its own files:

    metrics.jsonl       {"iteration": k, "lm_loss": x, "step_time_s": t} per step
    logits.safetensors  first-step logits [batch, seq, vocab] and loss
    grads.safetensors   first-step gradients, full (unsharded) shapes
    init.safetensors    the initial weights
    final.safetensors   the weights after --weights-after steps (the oracle compares them
                        there; default: after the last step)
    roundtrip.safetensors  with --roundtrip-from CKPT: that checkpoint sharded onto this mesh
                        (each rank's shards saved to its own file), loaded back and gathered
    TRACE/sites.txt, TRACE/step{0,1}.safetensors
                        with --trace-dir TRACE: every layer's values (embedding, MLP output
                        after its all-reduce, layer output, logits) and the finalized gradients
                        of the first two steps, whole-batch, in the order they were computed

Parallelism is explicit, inside `shard_map` over a ("dp", "tp") mesh:
- each layer is column-parallel `w1` [H, F/tp] then row-parallel `w2` [F/tp, H], whose partial
  outputs are summed with `psum` over "tp" (the forward all-reduce; JAX's transpose of the
  implicit broadcast gives the backward one);
- the batch is split over "dp"; each rank's loss is its token sum divided by the *global* token
  count, and gradients are summed with `psum` over "dp".

Bug switches (`--bug NAME`), the ways such code goes wrong:
    skip-tp-psum            the row-parallel output is never all-reduced
    skip-dp-grad-psum       gradients are not all-reduced across data-parallel ranks
    local-loss-normalization  each rank divides by its own token count
    drop-tp-shard           the sharded saver keeps only tensor-parallel rank 0's shards
    skip-head-grad-psum     the output head's gradient alone is not all-reduced across
                            data-parallel ranks (with --clip-grad-norm, its error reaches every
                            gradient through the clip coefficient)
    write-dp-shard-as-whole the logits and the traced activations are written as the first
                            device's block of their batch rows, as if it were the whole array
                            (the training is right, what is written is not: hooks that take a
                            per-rank tensor for a whole one, as under torchtitan's spmd_types)

With --clip-grad-norm C the gradients are clipped to global norm C (the norm over every
parameter, tensor-parallel shards summed over "tp") before the update, and recorded after it,
as many training loops record them.
"""

import argparse
import json
import os
import sys
import time

import sharded_checkpoint
from meshparity_hooks import inputs


RESUME_BUGS = ["resume-moments-dropped", "resume-step-reset", "resume-data-position-reset"]


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--weights-after", type=int, default=0,
                   help="write final.safetensors after this many steps (0: after the last)")
    p.add_argument("--out", required=True)
    p.add_argument("--roundtrip-from", default="",
                   help="a checkpoint to save sharded for this mesh and load back (empty: none)")
    p.add_argument("--trace-dir", default="",
                   help="write per-site traces of the first two steps there (empty: none)")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--ffn", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    p.add_argument("--weight-decay", type=float, default=0.0,
                   help="AdamW's decoupled weight decay")
    p.add_argument("--save-at", type=int, default=0,
                   help="after this step, save the checkpoint into --save-dir and stop (0: never)")
    p.add_argument("--save-dir", default="")
    p.add_argument("--resume-from", default="",
                   help="a checkpoint --save-dir holds: load it and train on (empty: start fresh)")
    p.add_argument("--loaded-dir", default="",
                   help="where to write the state as loaded, gathered (empty: nowhere)")
    p.add_argument("--state-at", type=int, default=0,
                   help="after this step, write the state gathered into --state-dir and train on "
                        "(0: never)")
    p.add_argument("--state-dir", default="")
    p.add_argument("--clip-grad-norm", type=float, default=0.0,
                   help="clip gradients to this global norm (0: no clipping)")
    p.add_argument("--dtype", default="f32", choices=["f32", "f64"])
    p.add_argument("--bug", default="none",
                   choices=["none", "skip-tp-psum", "skip-dp-grad-psum", "local-loss-normalization",
                            "drop-tp-shard", "skip-head-grad-psum", "write-dp-shard-as-whole",
                            *RESUME_BUGS])
    return p.parse_args()


def main():
    a = parse()
    world = a.tp * a.dp
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={world}".strip()
    if a.dtype == "f64":
        os.environ["JAX_ENABLE_X64"] = "1"
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from safetensors.numpy import save_file

    if a.ffn % a.tp or a.batch % a.dp:
        sys.exit(f"error: ffn {a.ffn} must divide by tp {a.tp} and batch {a.batch} by dp {a.dp}")
    devices = jax.devices()
    if len(devices) < world:
        sys.exit(f"error: {world} devices needed, {len(devices)} found")
    mesh = Mesh(np.array(devices[:world]).reshape(a.dp, a.tp), ("dp", "tp"))
    dt = np.float64 if a.dtype == "f64" else np.float32

    rng = np.random.default_rng(a.seed)
    init = {"embed": rng.normal(0, 1.0, (a.vocab, a.hidden))}
    for l in range(a.layers):
        init[f"layers.{l}.w1"] = rng.normal(0, a.hidden ** -0.5, (a.hidden, a.ffn))
        init[f"layers.{l}.w2"] = rng.normal(0, a.ffn ** -0.5, (a.ffn, a.hidden))
    init["head"] = rng.normal(0, a.hidden ** -0.5, (a.hidden, a.vocab))
    init = {k: v.astype(dt) for k, v in init.items()}

    def spec(name):
        if name.endswith(".w1"):
            return P(None, "tp")
        if name.endswith(".w2"):
            return P("tp", None)
        return P()

    specs = {k: spec(k) for k in init}
    params = {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in init.items()}
    global_tokens = a.batch * a.seq
    local_tokens = global_tokens // a.dp

    def varying(v, axis):
        if hasattr(jax.lax, "pcast"):
            return jax.lax.pcast(v, axis, to="varying")
        return jax.lax.pvary(v, axis)  # JAX before 0.8.2

    def rank0(v, axis):
        """What rank 0 of `axis` holds: how a buggy program's replicas that drifted apart look
        in the files its rank 0 writes."""
        return jax.lax.psum(jnp.where(jax.lax.axis_index(axis) == 0, v, 0), axis)

    def local_step(p0, opt, count, x, y):
        # Data-parallel replicas, made explicit: each rank differentiates its own copy, so the
        # gradient all-reduce below is ours to make (or to forget).
        p = jax.tree_util.tree_map(lambda t: varying(t, "dp"), p0)

        def loss_fn(p):
            h = p["embed"][x]
            sites = {"embed.out": h}
            for l in range(a.layers):
                o = jax.nn.gelu(h @ p[f"layers.{l}.w1"]) @ p[f"layers.{l}.w2"]
                if a.bug != "skip-tp-psum":
                    o = jax.lax.psum(o, "tp")
                h = h + o
                sites[f"layers.{l}.mlp.out"] = o
                sites[f"layers.{l}.out"] = h
            logits = h @ p["head"]
            sites["logits"] = logits
            nll = jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(
                logits, y[..., None], axis=-1)[..., 0]
            count = local_tokens if a.bug == "local-loss-normalization" else global_tokens
            return nll.sum() / count, (logits, sites)

        (loss, (logits, sites)), g = jax.value_and_grad(loss_fn, has_aux=True)(p)
        if a.bug == "skip-dp-grad-psum":
            g = jax.tree_util.tree_map(lambda t: rank0(t, "dp"), g)
        else:
            g = {k: rank0(t, "dp") if a.bug == "skip-head-grad-psum" and k == "head"
                 else jax.lax.psum(t, "dp") for k, t in g.items()}
        if a.clip_grad_norm > 0:
            # Sums of squares: a tensor-parallel shard's summed over "tp", a replicated
            # parameter's counted once.
            sharded = sum(jnp.sum(t * t) for k, t in g.items() if specs[k] != P())
            whole = sum(jnp.sum(t * t) for k, t in g.items() if specs[k] == P())
            norm = jnp.sqrt(jax.lax.psum(sharded, "tp") + whole)
            coef = jnp.minimum(1.0, a.clip_grad_norm / (norm + 1e-6))
            g = jax.tree_util.tree_map(lambda t: t * coef, g)
        loss = jax.lax.psum(loss, "dp")
        if a.bug == "skip-tp-psum":
            loss, logits = rank0(loss, "tp"), rank0(logits, "tp")
            sites = {k: rank0(v, "tp") for k, v in sites.items()}
            g = {k: rank0(t, "tp") if specs[k] == P() else t for k, t in g.items()}
        new, opt = update(p0, opt, g, count)
        return new, opt, loss, logits, g, sites

    def update(p, opt, g, count):
        """SGD, or AdamW (torch's: decoupled decay, bias correction by the step `count`)."""
        if a.optimizer == "sgd":
            return {k: p[k] - a.lr * g[k] for k in p}, opt
        b1, b2, eps = 0.9, 0.999, 1e-8
        m = {k: b1 * opt["exp_avg"][k] + (1 - b1) * g[k] for k in g}
        v = {k: b2 * opt["exp_avg_sq"][k] + (1 - b2) * g[k] * g[k] for k in g}
        c1, c2 = 1 - b1 ** count, 1 - b2 ** count
        new = {k: p[k] * (1 - a.lr * a.weight_decay)
               - a.lr * (m[k] / c1) / (jnp.sqrt(v[k] / c2) + eps) for k in p}
        return new, {"exp_avg": m, "exp_avg_sq": v}

    site_names = ["embed.out"] + [
        f"layers.{l}.{s}" for l in range(a.layers) for s in ("mlp.out", "out")] + ["logits"]
    opt_specs = {"exp_avg": specs, "exp_avg_sq": specs} if a.optimizer == "adamw" else {}
    step = jax.jit(jax.shard_map(
        local_step, mesh=mesh,
        in_specs=(specs, opt_specs, P(), P("dp"), P("dp")),
        out_specs=(specs, opt_specs, P(), P("dp"), specs, {n: P("dp") for n in site_names}),
    ))
    opt = {group: {k: jax.device_put(np.zeros_like(v), NamedSharding(mesh, specs[k]))
                   for k, v in init.items()} for group in opt_specs}
    # Steps trained, the optimizer's step count, batches consumed: one in a correct run, three
    # counters a checkpoint must each carry across a stop.
    done, opt_step, position = 0, 0, 0
    if a.resume_from:
        params, opt, done, opt_step, position = resume(a, mesh, specs, opt_specs)
    if a.trace_dir:
        os.makedirs(a.trace_dir, exist_ok=True)
        with open(os.path.join(a.trace_dir, "sites.txt"), "w") as f:
            f.write("\n".join(site_names + [f"grad.{n}" for n in init]) + "\n")

    os.makedirs(a.out, exist_ok=True)
    save_file(dict(init), os.path.join(a.out, "init.safetensors"))
    if a.roundtrip_from:
        roundtrip(a, mesh, specs, os.path.join(a.out, "roundtrip.safetensors"))
    with open(os.path.join(a.out, "metrics.jsonl"), "w") as metrics:
        for k in range(done, a.steps):
            data = np.random.default_rng([a.seed, position + 1])
            tokens = data.integers(0, a.vocab, (a.batch, a.seq + 1))
            x, y = jnp.asarray(tokens[:, :-1]), jnp.asarray(tokens[:, 1:])
            # The rows each device trains on (its data-parallel block), recorded for
            # meshparity to hold to the reference's (`artifacts.inputs`).
            x = jax.device_put(x, NamedSharding(mesh, P("dp")))
            devices = list(mesh.devices.flat)
            rows = {devices.index(s.device): np.asarray(s.data) for s in x.addressable_shards}
            inputs.write(os.path.join(a.out, "inputs.jsonl"), k + 1, rows, truncate=k == done)
            opt_step, position = opt_step + 1, position + 1
            start = time.perf_counter()
            params, opt, loss_array, logits, grads, sites = step(
                params, opt, jnp.asarray(opt_step, dt), x, y)
            loss = float(loss_array)
            seconds = time.perf_counter() - start
            metrics.write(json.dumps(
                {"iteration": k + 1, "lm_loss": loss, "step_time_s": seconds}) + "\n")
            # What is written: the whole array, or (the bug) the first device's block of it.
            written = np.asarray
            if a.bug == "write-dp-shard-as-whole":
                def written(t):
                    return np.asarray(t.addressable_shards[0].data)
            if k == 0:
                save_file({"logits": written(logits), "loss": np.asarray(loss_array).reshape(1)},
                          os.path.join(a.out, "logits.safetensors"))
                save_file({n: np.asarray(t) for n, t in grads.items()},
                          os.path.join(a.out, "grads.safetensors"))
            if a.trace_dir and k < 2:
                values = {n: written(v) for n, v in sites.items()}
                values.update({f"grad.{n}": np.asarray(t) for n, t in grads.items()})
                save_file(values, os.path.join(a.trace_dir, f"step{k}.safetensors"))
            if k + 1 == a.weights_after:
                save_file({n: np.asarray(t) for n, t in params.items()},
                          os.path.join(a.out, "final.safetensors"))
            print(f"step {k + 1}/{a.steps} loss {loss:.6f}", flush=True)
            if k + 1 == a.state_at:
                merged(a.state_dir, params, opt, opt_step)
            if k + 1 == a.save_at:
                counters = {"done": k + 1, "opt_step": opt_step, "position": position}
                sharded_checkpoint.save(a.save_dir, {**params, **flat(opt)}, counters)
                merged(a.save_dir, params, opt, opt_step)
                print(f"saved the checkpoint after step {k + 1} to {a.save_dir}", flush=True)
                return
    if not 0 < a.weights_after <= a.steps:
        save_file({n: np.asarray(t) for n, t in params.items()},
                  os.path.join(a.out, "final.safetensors"))


def flat(opt):
    """The optimizer's state as named arrays: `exp_avg.NAME`, `exp_avg_sq.NAME`."""
    return {f"{group}.{k}": v for group, tensors in opt.items() for k, v in tensors.items()}


def merged(directory, params, opt, opt_step):
    """The training state gathered to whole arrays, as meshparity reads it: the weights in
    final.safetensors, the optimizer's state and step count in optimizer.safetensors."""
    import numpy as np
    from safetensors.numpy import save_file

    os.makedirs(directory, exist_ok=True)
    save_file({n: np.asarray(t) for n, t in params.items()},
              os.path.join(directory, "final.safetensors"))
    state = {n: np.asarray(t) for n, t in flat(opt).items()}
    state["step"] = np.asarray([opt_step], dtype=np.int64)
    save_file(state, os.path.join(directory, "optimizer.safetensors"))


def resume(a, mesh, specs, opt_specs):
    """The checkpoint in --resume-from, laid out for this run's mesh, and its counters (with a
    resumption bug, wrong as that bug is); the state as loaded goes to --loaded-dir."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding

    names = {k: NamedSharding(mesh, specs[k]) for k in specs}
    names.update({f"{g}.{k}": NamedSharding(mesh, specs[k]) for g in opt_specs for k in specs})
    arrays, counters = sharded_checkpoint.load(a.resume_from, names)
    params = {k: arrays[k] for k in specs}
    opt = {g: {k: arrays[f"{g}.{k}"] for k in specs} for g in opt_specs}
    if a.bug == "resume-moments-dropped":
        # A loader that restores the model but builds the optimizer afresh.
        opt = {g: {k: jax.device_put(np.zeros(v.shape, v.dtype), v.sharding)
                   for k, v in t.items()} for g, t in opt.items()}
    done, opt_step, position = counters["done"], counters["opt_step"], counters["position"]
    if a.bug == "resume-step-reset":
        opt_step = 0
    if a.bug == "resume-data-position-reset":
        position = 0
    if a.loaded_dir:
        merged(a.loaded_dir, params, opt, opt_step)
    print(f"resumed after step {done} from {a.resume_from}", flush=True)
    return params, opt, done, opt_step, position


def roundtrip(a, mesh, specs, path):
    """The checkpoint sharded as training holds it, each device's shard saved to its own file,
    read back into sharded arrays and gathered: what a distributed save/load does."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from safetensors.numpy import load_file, save_file

    full = load_file(a.roundtrip_from)
    shard_dir = os.path.join(a.out, "shards")
    os.makedirs(shard_dir, exist_ok=True)
    back = {}
    for name, value in full.items():
        sharding = NamedSharding(mesh, specs[name])
        arr = jax.device_put(value, sharding)
        pieces = []
        for i, shard in enumerate(arr.addressable_shards):
            data = np.asarray(shard.data)
            tp_rank = mesh.devices.flatten().tolist().index(shard.device) % a.tp
            if a.bug == "drop-tp-shard" and tp_rank != 0:
                data = np.zeros_like(data)
            file = os.path.join(shard_dir, f"{name}.{i}.safetensors")
            save_file({"x": data}, file)
            pieces.append(jax.device_put(load_file(file)["x"], shard.device))
        loaded = jax.make_array_from_single_device_arrays(value.shape, sharding, pieces)
        back[name] = np.asarray(loaded)
    save_file(back, path)


if __name__ == "__main__":
    main()
