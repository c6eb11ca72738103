#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One table of gqla-bench --topk rows (JSON lines) beside the torch peer
(peer_sparse.py's JSON): sparse and dense device time, their ratio, and the
peer's time over gqla's. Usage: sparse_table.py SPARSE.jsonl [PEER.json]"""
import json
import os
import sys


def main():
    peer = {}
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        for r in json.load(open(sys.argv[2])):
            peer[(r["preset"], r["path"], r["batch"], r["context"], r["topk"], r["s_q"])] = r
    print(f"{'preset':<16}{'path':<8}{'B':>4}{'T':>7}{'K':>6}{'s_q':>4}{'sparse_us':>11}{'dense_us':>10}"
          f"{'ratio':>7}{'torch_us':>10}{'torch/gqla':>11}  torch form")
    for line in open(sys.argv[1]):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        sp, de = r["sparse_median_s"] * 1e6, r["dense_median_s"] * 1e6
        p = peer.get((r["preset"], r["path"], r["batch"], r["context"], r["topk"], r["s_q"])) or {}
        t = p.get("peer_us")
        print(f"{r['preset']:<16}{r['path']:<8}{r['batch']:>4}{r['context']:>7}{r['topk']:>6}{r['s_q']:>4}"
              f"{sp:>11.1f}{de:>10.1f}{sp / de:>7.2f}{(t or float('nan')):>10.1f}"
              f"{(t / sp if t else float('nan')):>10.2f}x  {p.get('peer') or '-'}")


if __name__ == "__main__":
    main()
