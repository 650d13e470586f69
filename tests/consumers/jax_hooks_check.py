"""meshparity_hooks.jax on 8 simulated CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=8):

    python3 tests/consumers/jax_hooks_check.py OUT

Replica digests group the devices holding the same index of an array and see one device's
copy drift; the Writer writes gradients at the spec's point only; the Tracer writes sites.txt
and step files of the traced steps; dropout_mask cuts world size 1's mask. Prints `ok`.
Run by tests/jax_hooks.rs.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from safetensors.numpy import load_file

from meshparity_hooks.jax import Tracer, Writer, dropout_mask, replica_digests


def main():
    out = sys.argv[1]
    devices = np.array(jax.devices()).reshape(2, 4)
    mesh = Mesh(devices, ("dp", "tp"))
    norm = jax.device_put(jnp.ones(8), NamedSharding(mesh, P()))          # replicated on 8
    w1 = jax.device_put(jnp.arange(32.0).reshape(4, 8), NamedSharding(mesh, P(None, "tp")))
    d = replica_digests({"norm": norm, "w1": w1})
    groups = {g["group"]: g for g in d["groups"]}
    assert d["world_size"] == 8, d
    norm_groups = [g for g in d["groups"] if g["param"] == "norm"]
    assert len(norm_groups) == 1 and len(norm_groups[0]["ranks"]) == 8, norm_groups
    w1_groups = [g for g in d["groups"] if g["param"] == "w1"]
    assert len(w1_groups) == 4 and all(len(g["ranks"]) == 2 for g in w1_groups), w1_groups
    assert all(len(set(g["digests"])) == 1 for g in groups.values())

    # One device's copy of the replicated norm drifts: its group disagrees, naming that device.
    shards = [np.ones(8, np.float32) for _ in range(8)]
    shards[5] = shards[5] + 1e-3
    drifted = jax.make_array_from_single_device_arrays(
        (8,), NamedSharding(mesh, P()),
        [jax.device_put(s, dev) for s, dev in zip(shards, devices.ravel())])
    w = Writer(os.path.join(out, "w"), grad_point="before_clip")
    d = w.digests({"norm": drifted})
    g = d["groups"][0]
    odd = [r for r, h in zip(g["ranks"], g["digests"]) if h != g["digests"][0]]
    assert odd == [int(devices.ravel()[5].id)], (odd, g)
    assert json.load(open(os.path.join(out, "w", "digests.json"))) == d

    w.grads({"w1": w1}, "before_clip")
    w.grads({"w1": w1 * 0}, "after_clip")
    got = load_file(os.path.join(out, "w", "grads.safetensors"))
    assert (got["w1"] == np.asarray(w1)).all(), "the before_clip gradients were not the ones kept"

    tracer = Tracer(os.path.join(out, "trace"), steps=(0,))
    for step in range(2):
        tracer.begin(step)
        tracer.values({"embed": w1 + step, "layers.0.out": w1 * 2})
        tracer.grads({"w1": w1})
        tracer.end()
    sites = open(os.path.join(out, "trace", "sites.txt")).read().split()
    assert sites == ["embed", "layers.0.out", "grad.w1"], sites
    assert not os.path.exists(os.path.join(out, "trace", "step1.safetensors"))
    step0 = load_file(os.path.join(out, "trace", "step0.safetensors"))
    assert (step0["embed"] == np.asarray(w1)).all()

    # Values whose memory is not their logical order (a numpy transpose, a strided slice, a
    # broadcast view), beside a JAX array's transpose: every writer writes their logical values.
    base = np.arange(24.0, dtype=np.float32).reshape(4, 6)
    views = {
        "transposed": base.T,
        "sliced": base[:, 1::2],
        "broadcast": np.broadcast_to(np.arange(3.0, dtype=np.float32), (4, 3)),
        "jax_transposed": jnp.asarray(base).T,
    }
    logical = {k: np.array(np.asarray(v).tolist(), dtype=np.float32) for k, v in views.items()}
    w.grads(views, "before_clip", name="views.safetensors")
    vt = Tracer(os.path.join(out, "views-trace"), steps=(0,))
    vt.begin(0)
    vt.values(views)
    vt.end()
    for path in ["w/views.safetensors", "views-trace/step0.safetensors"]:
        got = load_file(os.path.join(out, path))
        for k, v in logical.items():
            assert got[k].shape == v.shape and (got[k] == v).all(), (path, k, got[k], v)

    whole = dropout_mask(7, 1, "layers.0.hidden", (4, 6, 8), 0.25)
    part = dropout_mask(7, 1, "layers.0.hidden", (4, 6, 8), 0.25, (slice(2, 4), slice(0, 3)))
    assert (part == whole[2:4, 0:3]).all()
    assert abs((whole > 0).mean() - 0.75) < 0.1
    print("ok")


if __name__ == "__main__":
    main()
