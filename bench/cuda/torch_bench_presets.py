#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch version of gqla-bench's presets on a GPU: the same shapes, decoded
the way a PyTorch model does it, so gqla's CUDA times have a comparison point.

Implementations per case (one JSON line each with --json):
  GQA kind : "repeat_kv"  K/V repeated per query head, matmul-softmax-matmul
             "sdpa"       F.scaled_dot_product_attention(enable_gqa=True)
  GQLA kind: "per_head"   keys/values materialized per query head (the naive
                          MLA cache), matmul-softmax-matmul
             "absorb"     the absorb path in einsums over the latent cache
Times are medians of CUDA-event-timed calls rotating over >= 512 MiB of cache
(cold L2), like gqla-bench.

  python3 bench/cuda/torch_bench_presets.py --preset all --batch 1 --context 4096 --json
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F

PRESETS = {
    "llama3-8b": dict(kind="gqa", H=32, G=8, D=128, Dv=128),
    "llama3-8b-gqla": dict(kind="gqla", H=32, G=8, r=512, d_c=64, d_r=64, d_v=128),
    "deepseek-v3": dict(kind="gqla", H=128, G=128, r=512, d_c=128, d_r=64, d_v=128),
    "mla16": dict(kind="gqla", H=16, G=16, r=512, d_c=128, d_r=64, d_v=128),
}
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
COLD_BYTES = 512 << 20


def causal_mask(s_q, L, device):
    # query i sits at position L - s_q + i and sees j <= L - s_q + i
    i = torch.arange(s_q, device=device).view(s_q, 1)
    j = torch.arange(L, device=device).view(1, L)
    return j <= (L - s_q + i)


def attend(q, k, v, scale, mask):
    # q [B,H,s_q,Dk], k [B,H,L,Dk], v [B,H,L,Dv]
    s = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    s = s.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1).to(v.dtype), v)


def make_sets(make_one, bytes_per_set, hot):
    n = 1 if hot else max(2, math.ceil(COLD_BYTES / bytes_per_set))
    return [make_one() for _ in range(n)]


def time_calls(fn, sets, reps):
    for s in sets[: min(2, len(sets))]:
        fn(*s)
    times = []
    for i in range(reps):
        s = sets[i % len(sets)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*s)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def gqa_cases(p, B, L, s_q, dt, reps, hot, dev):
    H, G, D, Dv = p["H"], p["G"], p["D"], p["Dv"]
    scale, mask, n_rep = 1 / math.sqrt(D), causal_mask(s_q, L, dev), H // G
    elt = torch.empty((), dtype=dt).element_size()
    sets = make_sets(lambda: (torch.randn(B, G, L, D, device=dev, dtype=dt),
                              torch.randn(B, G, L, Dv, device=dev, dtype=dt)),
                     B * G * L * (D + Dv) * elt, hot)
    q = torch.randn(B, H, s_q, D, device=dev, dtype=dt)
    yield "repeat_kv", time_calls(lambda k, v: attend(q, k.repeat_interleave(n_rep, 1),
                                                      v.repeat_interleave(n_rep, 1), scale, mask), sets, reps)
    yield "sdpa", time_calls(lambda k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, enable_gqa=True), sets, reps)


def gqla_cases(p, B, L, s_q, dt, reps, hot, dev):
    H, G, r, d_c, d_r, d_v = (p[k] for k in ("H", "G", "r", "d_c", "d_r", "d_v"))
    scale, mask, n_rep = 1 / math.sqrt(d_c + d_r), causal_mask(s_q, L, dev), H // G
    elt = torch.empty((), dtype=dt).element_size()
    q = torch.randn(B, H, s_q, d_c + d_r, device=dev, dtype=dt)
    w = (torch.randn(G, d_c + d_v, r, device=dev) / math.sqrt(r)).to(dt)
    w_uk = w[:, :d_c].repeat_interleave(n_rep, 0)     # [H, d_c, r]
    w_uv = w[:, d_c:].repeat_interleave(n_rep, 0)     # [H, d_v, r]

    per_head = make_sets(lambda: (torch.randn(B, H, L, d_c + d_r, device=dev, dtype=dt),
                                  torch.randn(B, H, L, d_v, device=dev, dtype=dt)),
                         B * H * L * (d_c + d_r + d_v) * elt, hot)
    yield "per_head", time_calls(lambda k, v: attend(q, k, v, scale, mask), per_head, reps)
    del per_head

    latent = make_sets(lambda: (torch.randn(B, L, r, device=dev, dtype=dt),
                                torch.randn(B, L, d_r, device=dev, dtype=dt)),
                       B * L * (r + d_r) * elt, hot)
    qc, qr = q[..., :d_c], q[..., d_c:]

    def absorb(c, kr):
        q_lat = torch.einsum("bhsc,hcr->bhsr", qc, w_uk)                        # W_UK^T qc
        s = (torch.einsum("bhsr,blr->bhsl", q_lat, c) + torch.einsum("bhsd,bld->bhsl", qr, kr)).float() * scale
        p_ = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1).to(dt)
        o_lat = torch.einsum("bhsl,blr->bhsr", p_, c)
        return torch.einsum("bhsr,hvr->bhsv", o_lat, w_uv)                     # W_UV o~

    yield "absorb", time_calls(absorb, latent, reps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="llama3-8b-gqla")
    ap.add_argument("--dtype", default="bf16", choices=DTYPES)
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--context", default="1024,4096,16384")
    ap.add_argument("--s-q", default="1")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--hot", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",") if x]
    presets = list(PRESETS) if a.preset == "all" else a.preset.split(",")
    dev, dt = torch.device("cuda"), DTYPES[a.dtype]
    for name in presets:
        p = PRESETS[name]
        cases = gqa_cases if p["kind"] == "gqa" else gqla_cases
        for B in ints(a.batch):
            for L in ints(a.context):
                for s_q in ints(a.s_q):
                    try:
                        for impl, ms in cases(p, B, L, s_q, dt, a.reps, a.hot, dev):
                            row = dict(device="cuda", gpu=torch.cuda.get_device_name(), preset=name, kind=p["kind"],
                                       impl=impl, H=p["H"], G=p["G"], batch=B, context=L, s_q=s_q, dtype=a.dtype,
                                       ms=ms)
                            print(json.dumps(row) if a.json else
                                  f"{name:15s} {impl:10s} B={B:<3d} L={L:<6d} s_q={s_q} {a.dtype} {ms:9.4f} ms",
                                  flush=True)
                    except torch.OutOfMemoryError:
                        print(json.dumps(dict(preset=name, batch=B, context=L, s_q=s_q, skipped="out of GPU memory")))
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
