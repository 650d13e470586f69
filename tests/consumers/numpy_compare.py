"""The numpy way to compare two checkpoints, as the anchors' parity scripts do it: load each
tensor pair, compute the metrics meshparity computes, in float64. Used by the compare bench as
the baseline to beat. Prints the seconds it took and a checksum of the results.

  numpy_compare.py A.safetensors B.safetensors
"""
import sys
import time

import numpy as np
from safetensors import safe_open

RTOL, ATOL = 1.3e-6, 1e-5

start = time.perf_counter()
checksum = 0.0
with safe_open(sys.argv[1], "np") as fa, safe_open(sys.argv[2], "np") as fb:
    for name in fa.keys():
        a, b = fa.get_tensor(name), fb.get_tensor(name)
        bits_differ = int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
        a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
        d = b64 - a64
        ad, aa = np.abs(d), np.abs(a64)
        i = int(ad.argmax())
        nz = aa > 0
        max_rel = float((ad[nz] / aa[nz]).max()) if nz.any() else 0.0
        mean_abs_pct = 100.0 * ad.sum() / aa.sum()
        rel_l2 = np.sqrt((d * d).sum()) / np.sqrt((a64 * a64).sum())
        cosine = (a64 * b64).sum() / np.sqrt((a64 * a64).sum() * (b64 * b64).sum())
        mismatched = int(np.count_nonzero(ad > ATOL + RTOL * aa))
        finite = bool(np.isfinite(a64).all() and np.isfinite(b64).all())
        checksum += ad[i] + max_rel + mean_abs_pct + rel_l2 + cosine + mismatched + bits_differ + finite
print(f"{time.perf_counter() - start:.6f} {checksum:.6e}")
