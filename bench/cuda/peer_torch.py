#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Torch peers for the CUDA decode shapes gqla is measured on (H200 targets).

GQA: torch SDPA on contiguous K/V [B, G, T, D] (bf16), two ways: with
enable_gqa=True, and with each group's n_rep heads folded into the query
length ([B, G, n_rep * s_q, D] against the group's K/V, so K/V are read
once per group, as gqla does); each with the cuDNN, flash, efficient and
math backends; the fastest that runs is reported. With s_q > 1 query
tokens the mask is the decode causal rule (query i of s_q sees the first
T - s_q + 1 + i tokens; SDPA's is_causal aligns top-left instead), as an
explicit boolean mask. Absorb: a plain-torch implementation of the
absorb path (q~ = W_UK^T qc, scores over latent + rope key, o~ = P C,
o = W_UV o~). Timing: CUDA events around each call, median of many calls,
rotating over several input copies so the working set exceeds L2.
Prefill rows (--rows prefill; peer_prefill.py): chunks of s_q queries that
are the last s_q of T cached tokens, SDPA with the lower-right causal bias,
each backend forced in turn: GQA 32/8 D128 B=1 T=4096 s_q 128/512/2048, the
DeepSeek-V3 expanded MHA form (H=128, q/k dim 192 = 128 nope + 64 rope, v
dim 128) at s_q 2048, and a ragged step (47 sequences decoding 1 token at
T=4096 beside 1 sequence prefilling 2048): torch as its best of two
separate calls, whose times add up.
Prints a table and one JSON line per shape (also written with --json FILE).
"""
import argparse
import json
import math
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from peer_prefill import prefill_flops, prefill_peer

L2_BYTES = 256 << 20  # rotate until the inputs are several times the 60 MB L2


def median_time_us(fn, n_inputs, reps):
    for i in range(3):
        fn(i % n_inputs)
    torch.cuda.synchronize()
    times = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(reps):
        start.record()
        fn(i % n_inputs)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    times.sort()
    return times[len(times) // 2]


def gqa_peer(B, T, H=32, G=8, D=128, s_q=1, reps=50):
    dt = torch.bfloat16
    cache_bytes = 2 * B * G * T * D * 2
    copies = max(1, min(16, math.ceil(L2_BYTES / cache_bytes)))
    ks = [torch.randn(B, G, T, D, device="cuda", dtype=dt) for _ in range(copies)]
    vs = [torch.randn(B, G, T, D, device="cuda", dtype=dt) for _ in range(copies)]
    qs = [torch.randn(B, H, s_q, D, device="cuda", dtype=dt) for _ in range(copies)]
    n_rep = H // G
    mask = folded_mask = None
    if s_q > 1:  # True = attend: token j <= T - s_q + i
        mask = torch.arange(T, device="cuda")[None, :] <= (T - s_q + torch.arange(s_q, device="cuda"))[:, None]
        folded_mask = mask.repeat(n_rep, 1)  # row hi * s_q + qi

    def gqa(i):
        return F.scaled_dot_product_attention(qs[i], ks[i], vs[i], attn_mask=mask, enable_gqa=True)

    def folded(i):  # a view: heads (g, hi) and tokens qi of q [B, H, s_q, D] as rows of group g
        q = qs[i].view(B, G, n_rep * s_q, D)
        return F.scaled_dot_product_attention(q, ks[i], vs[i], attn_mask=folded_mask).view(B, H, s_q, D)

    # The two forms compute the same attention (bf16 rounding apart).
    torch.testing.assert_close(folded(0).float(), gqa(0).float(), rtol=2e-2, atol=2e-2)
    best = None
    for form, fn in [("", gqa), (", heads folded", folded)]:
        for name, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                              ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]:
            try:
                with warnings.catch_warnings(), sdpa_kernel([backend]):
                    warnings.simplefilter("ignore")  # backends that decline a shape say why, then raise
                    us = median_time_us(fn, copies, reps)
            except Exception:  # backend does not take this shape
                continue
            if best is None or us < best[1]:
                best = (name + form, us)
    return best, cache_bytes


def absorb_peer(B, T, H, G, r=512, dc=64, dr=64, dv=128, reps=30):
    dt = torch.bfloat16
    n = H // G
    cache_bytes = B * T * (r + dr) * 2
    copies = max(1, min(16, math.ceil(L2_BYTES / cache_bytes)))
    C = [torch.randn(B, T, r, device="cuda", dtype=dt) for _ in range(copies)]
    KR = [torch.randn(B, T, dr, device="cuda", dtype=dt) for _ in range(copies)]
    q = [torch.randn(B, H, dc + dr, device="cuda", dtype=dt) for _ in range(copies)]
    w = torch.randn(G, dc + dv, r, device="cuda", dtype=dt) / math.sqrt(r)
    w_uk, w_uv = w[:, :dc, :], w[:, dc:, :]
    scale = 1.0 / math.sqrt(dc + dr)

    def fn(i):
        qc, qr = q[i][..., :dc], q[i][..., dc:]
        q_lat = torch.einsum("bgnc,gcr->bgnr", qc.reshape(B, G, n, dc), w_uk).reshape(B, H, r)
        s = torch.bmm(q_lat, C[i].transpose(1, 2)) + torch.bmm(qr, KR[i].transpose(1, 2))
        p = torch.softmax(s.float() * scale, dim=-1).to(dt)
        o_lat = torch.bmm(p, C[i])
        return torch.einsum("bgnr,gvr->bgnv", o_lat.reshape(B, G, n, r), w_uv).reshape(B, H, dv)

    return ("torch-absorb", median_time_us(fn, copies, reps)), cache_bytes


def decode_rows(reps):
    rows = []
    for B, T, s_q in [(64, 4096, 1), (128, 8192, 1), (1, 32768, 1), (1, 1024, 1),
                      (16, 4096, 4), (64, 4096, 4), (16, 4096, 8), (64, 4096, 8)]:
        (impl, us), nbytes = gqa_peer(B, T, s_q=s_q, reps=reps)
        rows.append({"name": "gqa 32/8 D128", "kind": "decode", "B": B, "T": T, "s_q": s_q, "impl": impl,
                     "median_us": us, "gbps": nbytes / us / 1e3})
    for H, G, dc, label in [(32, 8, 64, "absorb H32 G8 r512 dr64 (llama3-8b-gqla)"),
                            (128, 128, 128, "absorb H128 G128 r512 dr64 (dsv3)")]:
        (impl, us), nbytes = absorb_peer(64, 16384, H, G, dc=dc, reps=max(10, reps // 2))
        rows.append({"name": label, "kind": "decode", "B": 64, "T": 16384, "s_q": 1, "impl": impl, "median_us": us,
                     "gbps": nbytes / us / 1e3})
        torch.cuda.empty_cache()
    return rows


def prefill_row(name, B, T, s_q, H, G, dqk, dv, reps):
    best, tried = prefill_peer(B, T, s_q, H, G, dqk, dv, reps, median_time_us, L2_BYTES)
    if best is None:
        return {"name": name, "kind": "prefill", "B": B, "T": T, "s_q": s_q, "impl": None, "median_us": None,
                "tried": tried}
    impl, us = best
    return {"name": name, "kind": "prefill", "B": B, "T": T, "s_q": s_q, "H": H, "G": G, "dqk": dqk, "dv": dv,
            "impl": impl, "median_us": us, "tflops": prefill_flops(B, T, s_q, H, dqk, dv) / us / 1e6, "tried": tried}


def prefill_rows(reps):
    rows = [prefill_row("gqa 32/8 D128", 1, 4096, s_q, 32, 8, 128, 128, reps) for s_q in (128, 512, 2048)]
    rows.append(prefill_row("dsv3 MHA expanded (H128, qk 192, v 128)", 1, 4096, 2048, 128, 128, 192, 128, reps))
    # Ragged step as two calls: 47 decoding sequences, and the 2048-query
    # chunk (the s_q 2048 row above is that very call).
    (impl, us), _ = gqa_peer(47, 4096, s_q=1, reps=reps)
    decode = {"name": "gqa 32/8 D128", "kind": "decode", "B": 47, "T": 4096, "s_q": 1, "impl": impl,
              "median_us": us}
    chunk = rows[2]
    total = us + chunk["median_us"] if chunk["median_us"] is not None else None
    rows.append(decode)
    rows.append({"name": "gqa 32/8 D128 ragged 1x47,2048x1", "kind": "ragged", "B": 48, "T": 4096,
                 "q_lens": "1x47,2048x1", "impl": f"two calls: {impl} + {chunk['impl']}", "median_us": total,
                 "parts_us": [us, chunk["median_us"]]})
    return rows


def print_row(r):
    us = r["median_us"]
    rate = f"{r['gbps']:7.0f} GB/s" if "gbps" in r else (f"{r['tflops']:7.1f} TFLOP/s" if "tflops" in r else "")
    shape = f"B={r['B']:<4} T={r['T']:<6} " + (f"s_q={r['s_q']}" if "s_q" in r else f"q_lens={r['q_lens']}")
    print(f"{r['name']:<42} {shape:<28} " + (f"{us:9.1f} us {rate}  ({r['impl']})" if us else "no backend ran"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rows", default="decode,prefill", help="comma list of decode, prefill")
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    groups = args.rows.split(",")
    rows = []
    if "decode" in groups:
        rows += decode_rows(args.reps)
    if "prefill" in groups:
        rows += prefill_rows(args.reps)
    for r in rows:
        print_row(r)
    for r in rows:
        if r["kind"] == "prefill":  # every backend and form tried, for the log
            print(f"  {r['name']} s_q={r['s_q']}: " + "; ".join(f"{k}: {v}" for k, v in r["tried"].items()))
    for r in rows:
        print("JSON " + json.dumps(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
