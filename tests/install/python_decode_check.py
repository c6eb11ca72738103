# SPDX-License-Identifier: Apache-2.0
"""python3 python_decode_check.py EXPECTED_DIR: run by an installed gqla's
interpreter. Decodes one GQA step on the CPU (and on the GPU when the
install carries the CUDA module and a GPU is visible), checks it against a
float64 NumPy computation, and checks that the gqla package and every
libgqla the process mapped lie under EXPECTED_DIR (the install under test,
not a build tree). Prints "OK ..." and exits 0, or says what is wrong and
exits 1.
"""

import os
import sys

import numpy as np

import gqla

H, G, D, N = 8, 2, 64, 97   # query heads, KV heads, head dim, cached tokens


def reference(q, k, v):
    """float64 attention of one query token: q [H, D], k/v [N, G, D] -> [H, D]."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    heads_per_group = H // G
    out = np.empty((H, D))
    for h in range(H):
        g = h // heads_per_group
        scores = k[:, g, :] @ q[h] / np.sqrt(D)
        weights = np.exp(scores - scores.max())
        out[h] = weights @ v[:, g, :] / weights.sum()
    return out


def decode(device):
    rng = np.random.default_rng(7)
    k = rng.standard_normal((N, G, D), np.float32)
    v = rng.standard_normal((N, G, D), np.float32)
    q = rng.standard_normal((1, 1, H, D), np.float32)
    # Host arrays serve a CUDA session too (copied to and from the device).
    cfg = gqla.Config.gqa(num_heads=H, num_kv_heads=G, head_dim=D, cache_dtype="f32", device=device,
                          max_tokens=256)
    with gqla.Session(cfg) as s:
        seq = s.add_sequence()
        s.append(0, seq, k, v)
        o = s.decode(0, [seq], q)
    want = reference(q[0, 0], k, v)
    return float(np.linalg.norm(o[0, 0] - want) / np.linalg.norm(want))


def loaded_gqla_files():
    """Every mapped file of this process whose name says gqla (libgqla*, _gqla*)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}
    return sorted(p for p in paths if "gqla" in os.path.basename(p))


def main():
    expected = os.path.realpath(sys.argv[1])
    devices = ["cpu"] + (["cuda"] if gqla.device_count("cuda") > 0 else [])
    errors = {device: decode(device) for device in devices}
    problems = [f"{device} decode differs from the float64 reference: relative L2 error {err:.3g}"
                for device, err in errors.items() if not err < 1e-5]
    files = [os.path.realpath(gqla.__file__)] + loaded_gqla_files()
    outside = [f for f in files if not f.startswith(expected + os.sep)]
    if outside:
        problems.append(f"loaded from outside {expected}: {outside}")
    if not any(os.path.basename(f).startswith("libgqla.so") for f in files):
        problems.append(f"no libgqla among the mapped files: {files}")
    if problems:
        print("\n".join(problems))
        return 1
    measured = ", ".join(f"{device} rel_err {err:.2e}" for device, err in errors.items())
    print(f"OK gqla {gqla.__version__}: {measured}; loaded {', '.join(files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
