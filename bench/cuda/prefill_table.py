#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Side-by-side table of prefill chunks: gqla-bench's JSON lines against the
torch peer's JSON (peer_torch.py --rows prefill), as run_on_gpu.sh prefill
writes them.

gqla µs is the device time (CUDA events around the call, as the peer
measures), TFLOP/s counts the causal pairs of the form that ran (gqla-bench's
`flops`), % peak is of the bf16 tensor peak gqla's probe measured. The torch
column is its fastest SDPA backend and form; torch/gqla > 1: gqla faster.
DeepSeek-V3 rows compare with SDPA on the expanded MHA form (H=128, qk 192, v
128); LLaMA-3-8B-GQLA rows with GQA 32/8 D128, the shape of its expanded form.
GQA rows over an fp8_e4m3 cache (where the JSON has them) compare with the
same bf16 SDPA row: torch has no 8-bit cache.

Usage: prefill_table.py GQLA.jsonl PEER.json
"""
import json
import sys


def load_gqla(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("ms") is not None:
                rows.append(r)
    return rows


def find(rows, **want):
    for r in rows:
        if all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def gqla_us(r):
    return (r.get("device_ms") or r["ms"]) * 1e3


def torch_row(peer, name, kind, s_q=None):
    for r in peer:
        if r["name"] == name and r["kind"] == kind and (s_q is None or r.get("s_q") == s_q):
            return r
    return None


def line(label, g, t, us=None):
    """One table line: gqla row g (or a time us), torch row t."""
    if g is None and us is None:
        print(f"{label:<42} {'(gqla row missing)':>10}")
        return
    us = gqla_us(g) if us is None else us
    t_us = t.get("median_us") if t else None
    cells = [f"{us:10.1f}", f"{t_us:10.1f}" if t_us else f"{'-':>10}", f"{t_us / us:8.2f}x" if t_us else f"{'-':>9}"]
    if g is not None:
        tflops = g["flops"] / (us * 1e-6) / 1e12
        peak = g.get("peak_bf16_gflops_machine") or g.get("peak_gflops_machine")
        cells += [f"{tflops:8.2f}", f"{100 * tflops * 1e3 / peak:6.1f}%" if peak else f"{'-':>7}",
                  f"{g['rel_err']:8.1e}" if g.get("rel_err") is not None else f"{'-':>8}"]
    else:
        cells += [f"{'':>8}", f"{'':>7}", f"{'':>8}"]
    print(f"{label:<42} " + " ".join(cells) + (f"  {t['impl']}" if t and t.get("impl") else ""))


def main():
    gqla = load_gqla(sys.argv[1])
    try:
        peer = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else []
    except (OSError, ValueError) as e:  # the peer did not run: gqla columns only
        print(f"(no torch peer: {e})")
        peer = []
    print(f"{'prefill, B=1 T=4096':<42} {'gqla_us':>10} {'torch_us':>10} {'torch/gqla':>9} {'TFLOP/s':>8} "
          f"{'%peak':>7} {'rel_err':>8}  torch backend")
    for dtype, label in (("bf16", ""), ("fp8_e4m3", " fp8")):
        for s_q in (128, 512, 2048):
            g = find(gqla, preset="llama3-8b", api="attention", s_q=s_q, q_lens=None, dtype=dtype)
            if g is not None or dtype == "bf16":
                line(f"GQA 32/8 D128{label} s_q={s_q}", g, torch_row(peer, "gqa 32/8 D128", "prefill", s_q))
    for preset, label, peer_name in [("deepseek-v3", "DeepSeek-V3", "dsv3 MHA expanded (H128, qk 192, v 128)"),
                                     ("llama3-8b-gqla", "LLaMA-3-8B-GQLA", "gqa 32/8 D128")]:
        t = torch_row(peer, peer_name, "prefill", 2048)
        for requested in ("auto", "absorb", "transient"):
            g = find(gqla, preset=preset, api="attention", s_q=2048, path_requested=requested, q_lens=None)
            how = f"auto>{g['path']}" if g and requested == "auto" else requested
            line(f"{label} s_q=2048 {how}", g, t)
    ragged = find(gqla, preset="llama3-8b", q_lens="1x47,2048x1")
    t_ragged = torch_row(peer, "gqa 32/8 D128 ragged 1x47,2048x1", "ragged")
    line("GQA ragged 1x47,2048x1, one call", ragged, t_ragged)
    decode = find(gqla, preset="llama3-8b", api="decode", batch=47, s_q=1)
    chunk = find(gqla, preset="llama3-8b", api="attention", s_q=2048, q_lens=None, dtype="bf16")
    if decode and chunk:
        line("  as 2 gqla calls (B=47 decode + chunk)", None, t_ragged, us=gqla_us(decode) + gqla_us(chunk))
        if ragged:
            print(f"  one ragged call / two calls: {gqla_us(ragged) / (gqla_us(decode) + gqla_us(chunk)):.2f}")


if __name__ == "__main__":
    main()
