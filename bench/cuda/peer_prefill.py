# SPDX-License-Identifier: Apache-2.0
"""Torch peers of prefill chunks (used by peer_torch.py --rows prefill).

A chunk is s_q queries that are the last s_q of a sequence's T cached
tokens: query i sees keys j <= T - s_q + i, SDPA's lower-right causal
alignment (torch.nn.attention.bias.causal_lower_right; SDPA's is_causal is
upper-left, wrong for s_q < T). Every SDPA backend that can run it is forced
in turn (flash, cuDNN, efficient), in each form that suits the shape:
  GQA (G < H)   enable_gqa=True, or K/V repeated per query head in the call
                (repeat_kv, what a model without enable_gqa does);
  qk dim != v dim (DeepSeek-V3 expanded: 192 / 128)
                as is, or V kept padded to the qk dim (flash needs equal
                dims; the output is sliced back);
each with the lower-right bias object and with an explicit boolean mask.
A combination that raises is skipped, one whose output is not the float32
reference's (relative L2 error > 2e-2) is reported as wrong and skipped;
the fastest of the rest is kept and named.
"""
import math
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def visible_pairs(s_q, T):
    """(query, key) pairs the causal rule lets a chunk see: query i sees T - s_q + 1 + i keys."""
    return s_q * (T - s_q) + s_q * (s_q + 1) // 2


def prefill_flops(B, T, s_q, H, dqk, dv):
    """2 * (dqk + dv) FLOPs per head and visible pair, as gqla-bench counts its GQA form."""
    return B * visible_pairs(s_q, T) * H * 2.0 * (dqk + dv)


def lower_right_mask(s_q, T, device):
    """True = attend: key j <= T - s_q + i for query i."""
    i = torch.arange(s_q, device=device)[:, None]
    return torch.arange(T, device=device)[None, :] <= (T - s_q + i)


def forms_of(q, k, v, v_padded, n_rep, s_q, T, dv):
    """name -> fn(i): the ways of calling SDPA on copy i of the inputs."""
    masks = [("lower-right bias", causal_lower_right(s_q, T)), ("bool mask", lower_right_mask(s_q, T, "cuda"))]
    forms = {}
    for mname, m in masks:
        if n_rep > 1:
            forms[f"enable_gqa, {mname}"] = lambda i, m=m: F.scaled_dot_product_attention(
                q[i], k[i], v[i], attn_mask=m, enable_gqa=True)
            forms[f"repeat_kv, {mname}"] = lambda i, m=m: F.scaled_dot_product_attention(
                q[i], k[i].repeat_interleave(n_rep, 1), v[i].repeat_interleave(n_rep, 1), attn_mask=m)
        else:
            forms[mname] = lambda i, m=m: F.scaled_dot_product_attention(q[i], k[i], v[i], attn_mask=m)
        if v_padded is not None:
            forms[f"v padded to {q[0].shape[-1]}, {mname}"] = lambda i, m=m: F.scaled_dot_product_attention(
                q[i], k[i], v_padded[i], attn_mask=m, enable_gqa=n_rep > 1)[..., :dv]
    return forms


def prefill_peer(B, T, s_q, H, G, dqk, dv, reps, time_fn, l2_bytes):
    """Fastest correct SDPA call of a chunk: ((impl, us), {impl: us or why not})."""
    dt = torch.bfloat16
    n_rep = H // G
    cache_bytes = B * G * T * (dqk + dv) * 2
    copies = max(1, min(16, math.ceil(l2_bytes / cache_bytes)))
    q = [torch.randn(B, H, s_q, dqk, device="cuda", dtype=dt) for _ in range(copies)]
    k = [torch.randn(B, G, T, dqk, device="cuda", dtype=dt) for _ in range(copies)]
    v = [torch.randn(B, G, T, dv, device="cuda", dtype=dt) for _ in range(copies)]
    v_padded = [F.pad(x, (0, dqk - dv)) for x in v] if dqk != dv else None

    with sdpa_kernel([SDPBackend.MATH]):  # float32 reference of copy 0, explicit mask
        ref = F.scaled_dot_product_attention(
            q[0].float(), k[0].float().repeat_interleave(n_rep, 1), v[0].float().repeat_interleave(n_rep, 1),
            attn_mask=lower_right_mask(s_q, T, "cuda"))
    tried, best = {}, None
    for form, fn in forms_of(q, k, v, v_padded, n_rep, s_q, T, dv).items():
        for bname, backend in BACKENDS:
            impl = f"{bname}, {form}"
            try:
                with warnings.catch_warnings(), sdpa_kernel([backend]):
                    warnings.simplefilter("ignore")  # backends that decline a shape say why, then raise
                    out = fn(0)
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    if not err <= 2e-2:
                        tried[impl] = f"wrong result (rel. error {err:.2g})"
                        continue
                    us = time_fn(fn, copies, reps)
            except Exception as e:  # this backend does not take this shape or form
                tried[impl] = f"not run: {str(e).splitlines()[0][:80] if str(e) else type(e).__name__}"
                continue
            tried[impl] = round(us, 2)
            if best is None or us < best[1]:
                best = (impl, us)
    del q, k, v, v_padded, ref
    torch.cuda.empty_cache()
    return best, tried
