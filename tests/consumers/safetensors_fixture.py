"""Cross-check meshparity's safetensors reader and writer with the reference implementation.

  safetensors_fixture.py write DIR   writes DIR/python.safetensors (every numpy dtype
                                     safetensors supports) and DIR/python-bumped.safetensors
                                     (element [2, 1] of every tensor changed)
  safetensors_fixture.py read FILE   loads FILE (written by meshparity) and checks that it holds
                                     exactly the tensors `write` makes; prints `ok`
"""
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8",
          "uint64", "uint32", "uint16", "uint8", "bool"]


def tensors(bump=False):
    out = {}
    for name in DTYPES:
        i = np.arange(24).reshape(4, 6)
        if name.startswith("float"):
            v = (i * 0.25 - 3.0).astype(name)  # exactly representable in every float dtype
        elif name == "bool":
            v = (i % 2 == 0)
        else:
            v = (i * 7 - 50).astype(name)  # wraps for unsigned types, like Rust's `as`
        if bump:
            v[2, 1] = (not v[2, 1]) if name == "bool" else v[2, 1] + 1
        out[name] = v
    return out


if sys.argv[1] == "write":
    save_file(tensors(), f"{sys.argv[2]}/python.safetensors")
    save_file(tensors(bump=True), f"{sys.argv[2]}/python-bumped.safetensors")
elif sys.argv[1] == "read":
    got = load_file(sys.argv[2])
    want = tensors()
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for k in want:
        assert got[k].dtype == want[k].dtype, (k, got[k].dtype, want[k].dtype)
        assert got[k].shape == want[k].shape, (k, got[k].shape)
        assert np.array_equal(got[k], want[k]), k
    print("ok")
