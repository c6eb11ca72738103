# SPDX-License-Identifier: Apache-2.0
"""A GQLA layer decode loop on the CPU with numpy.

Prefills a few sequences of different lengths, then generates tokens: each
step appends the new token's latent c and rope key kr, and decodes one query
per sequence. Prints the decode path the cost model picked and how far the
result is from a direct float64 numpy evaluation of the attention.

    PYTHONPATH=build/bindings/python /usr/bin/python3 examples/python/decode_loop.py
"""

import numpy as np

import gqla

# A small DeepSeek-style layer: 8 query heads in 2 latent groups.
H, G, R, D_NOPE, D_ROPE, D_V = 8, 2, 256, 64, 32, 64
rng = np.random.default_rng(0)


def reference_attention(q, c, kr, w_ukv):
    """o[h] = softmax(scale * (qc·W_UK c + qr·kr)) · W_UV c, in float64."""
    w = w_ukv.astype(np.float64).reshape(G, D_NOPE + D_V, R)
    keys = np.einsum("gdr,jr->gjd", w[:, :D_NOPE], c)    # [G, L, d_c]
    values = np.einsum("gvr,jr->gjv", w[:, D_NOPE:], c)  # [G, L, d_v]
    group = np.arange(H) // (H // G)
    scores = (np.einsum("hd,hjd->hj", q[:, :D_NOPE], keys[group]) + q[:, D_NOPE:] @ kr.T)
    scores /= np.sqrt(D_NOPE + D_ROPE)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return np.einsum("hj,hjv->hv", p, values[group])


config = gqla.Config.gqla(num_heads=H, num_groups=G, latent_dim=R, nope_dim=D_NOPE,
                          rope_dim=D_ROPE, value_dim=D_V, cache_dtype="f32", device="cpu")
w_ukv = (rng.standard_normal((G * (D_NOPE + D_V), R)) / np.sqrt(R)).astype(np.float32)

with gqla.Session(config) as session:
    session.set_weights(0, w_ukv)
    history = {}  # what we appended, for the reference
    for prompt_len in (5, 37, 120):
        seq = session.add_sequence()
        c = rng.standard_normal((prompt_len, R)).astype(np.float32)
        kr = rng.standard_normal((prompt_len, D_ROPE)).astype(np.float32)
        session.append(0, seq, c, kr)
        history[seq] = (c, kr)
    seqs = list(history)
    print(f"gqla {gqla.__version__}: {len(seqs)} sequences, decode path = {session.path}")
    cost = session.predict_cost(batch=len(seqs), context=64, s_q=1)
    print(f"cost model: gqa {cost['gqa']['time_s'] * 1e6:.1f} us, "
          f"absorb {cost['absorb']['time_s'] * 1e6:.1f} us -> {cost['chosen']}")

    out = np.empty((len(seqs), 1, H, D_V), np.float32)  # reused every step: no allocation
    worst = 0.0
    for step in range(8):
        # The model would produce these from the new token; random here.
        c_new = rng.standard_normal((len(seqs), R)).astype(np.float32)
        kr_new = rng.standard_normal((len(seqs), D_ROPE)).astype(np.float32)
        session.append_many(0, seqs, c_new, kr_new, counts=[1] * len(seqs))
        q = rng.standard_normal((len(seqs), 1, H, D_NOPE + D_ROPE)).astype(np.float32)
        session.decode(0, seqs, q, out=out)
        for i, seq in enumerate(seqs):
            c, kr = history[seq]
            history[seq] = (np.vstack([c, c_new[i:i + 1]]), np.vstack([kr, kr_new[i:i + 1]]))
            expected = reference_attention(q[i, 0].astype(np.float64), *history[seq], w_ukv)
            error = np.linalg.norm(out[i, 0] - expected) / np.linalg.norm(expected)
            worst = max(worst, error)
    lengths = [session.length(seq) for seq in seqs]
    print(f"8 steps done, lengths {lengths}; worst relative error vs numpy: {worst:.2e}")
    assert worst < 1e-5, "gqla disagrees with the numpy reference"
