"""The example trainer's distributed checkpoint, as sharded savers write them: each device
saves the shards it holds (one replica of each), and an index records where each shard sits in
its whole array, so that a run on another layout can read back exactly the slices it needs.

    index.json          {"arrays": {NAME: {"shape", "dtype", "shards": [{"file", "start",
                        "shape"}]}}, "counters": {...}}
    device{D}.safetensors  device D's shards, by array name
"""

import json
import os

import numpy as np
from safetensors.numpy import load_file, save_file


def save(directory, arrays, counters):
    """Save `arrays` (name -> sharded jax.Array) shard by shard, with `counters` (name -> int)."""
    os.makedirs(directory, exist_ok=True)
    files, index = {}, {}
    for name, arr in arrays.items():
        entry = {"shape": list(arr.shape), "dtype": str(arr.dtype), "shards": []}
        seen = set()
        for shard in arr.addressable_shards:
            start = [s.start or 0 for s in shard.index]
            if tuple(start) in seen:
                continue  # another replica of a shard already saved
            seen.add(tuple(start))
            file = f"device{shard.device.id}.safetensors"
            data = np.asarray(shard.data)
            files.setdefault(file, {})[name] = data
            entry["shards"].append({"file": file, "start": start, "shape": list(data.shape)})
        index[name] = entry
    for file, tensors in files.items():
        save_file(tensors, os.path.join(directory, file))
    with open(os.path.join(directory, "index.json"), "w") as f:
        json.dump({"arrays": index, "counters": counters}, f, indent=1)


def load(directory, shardings):
    """Every array `shardings` names (name -> NamedSharding on this run's mesh), assembled from
    the shards the index lists, and the counters. An array the shards do not cover whole is an
    error, never zeros."""
    import jax

    with open(os.path.join(directory, "index.json")) as f:
        index = json.load(f)
    cache = {}
    arrays = {}
    for name, sharding in shardings.items():
        entry = index["arrays"].get(name)
        if entry is None:
            raise SystemExit(f"error: checkpoint {directory} has no `{name}`")
        whole = np.zeros(entry["shape"], dtype=entry["dtype"])
        covered = np.zeros(entry["shape"], dtype=bool)
        for shard in entry["shards"]:
            if shard["file"] not in cache:
                cache[shard["file"]] = load_file(os.path.join(directory, shard["file"]))
            region = tuple(slice(s, s + n) for s, n in zip(shard["start"], shard["shape"]))
            whole[region] = cache[shard["file"]][name]
            covered[region] = True
        if not covered.all():
            raise SystemExit(f"error: checkpoint {directory}: the shards of `{name}` do not "
                             f"cover it whole")
        arrays[name] = jax.make_array_from_callback(
            whole.shape, sharding, lambda i, whole=whole: whole[i])
    return arrays, index["counters"]
