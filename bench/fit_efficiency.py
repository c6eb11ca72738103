#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Fits the cost model's per-path efficiency factors to measured decode times.

Input: the JSON of `gqla-bench --validate-auto --json`. Each row carries the
bytes and FLOPs of both paths (bytes_gqa, flops_gqa, bytes_absorb,
flops_absorb), the bandwidth and peak the session priced them with
(read_gbps, peak_gflops) and the measured times (meas_gqa_ms, meas_absorb_ms).

Model (core/cost_model.cpp), per path, with m = bytes / (bandwidth * memory)
and c = flops / (peak_gflops * compute):
    time = max(m, c) + serial_share * min(m, c) + overhead
where bandwidth is the row's read_gbps, capped at --read-cap-gbps (the
backend's thread_read_gbps times the session's threads) when given, and
serial_share is --serial-share (0: the terms overlap; 1: they add up). For
each path, a grid search followed by a finer grid around the best point
minimizes the mean squared log error of predicted against measured time (log
error weighs a 10 us call and a 10 ms call alike). Then it reports how AUTO
would do with the fitted factors: the fraction of rows where the cheaper
predicted path is the measured-faster one, the mean and max regret (measured
time of the pick over the best, minus 1) and the fraction of predictions
within +-35% of measured.

Usage: fit_efficiency.py RESULTS.json [RESULTS.json ...] [--serial-share S]
                         [--read-cap-gbps X] [--old MEMORY_GQA,MEMORY_ABSORB,...]
                         [--max-compute C] [--keep-gqa MEMORY,COMPUTE,OVERHEAD_US]
                         [--split-projection]
Several files are fitted together; the verdicts are also given per file.
"""
import argparse
import json
import sys

import numpy as np

PATHS = ("gqa", "absorb")


def load_rows(path):
    with open(path) as f:
        doc = json.load(f)
    rows = doc["rows"]
    needed = ["read_gbps", "peak_gflops"] + [f"{k}_{p}" for p in PATHS for k in ("bytes", "flops")]
    missing = [k for k in needed if any(k not in r for r in rows)]
    if missing:
        sys.exit(f"{path}: rows lack {', '.join(missing)} (rerun gqla-bench --validate-auto)")
    return doc, rows


READ_CAP_GBPS = None  # set by --read-cap-gbps
SERIAL_SHARE = 0.0  # set by --serial-share


def roofline_terms(rows, path):
    """Pure-roofline memory and compute seconds and measured seconds of a path."""
    cap = READ_CAP_GBPS if READ_CAP_GBPS else float("inf")
    memory = np.array([r[f"bytes_{path}"] / (min(r["read_gbps"], cap) * 1e9) for r in rows])
    compute = np.array([r[f"flops_{path}"] / (r["peak_gflops"] * 1e9) for r in rows])
    measured = np.array([r[f"meas_{path}_ms"] * 1e-3 for r in rows])
    return memory, compute, measured


def projection_seconds(rows):
    """Roofline seconds of the absorb projections (flops_absorb_projection)."""
    return np.array([r["flops_absorb_projection"] / (r["peak_gflops"] * 1e9) for r in rows])


def combine(memory_s, compute_s):
    return np.maximum(memory_s, compute_s) + SERIAL_SHARE * np.minimum(memory_s, compute_s)


def predict(memory, compute, factors, projection=None):
    """factors: (memory, compute, overhead), or with a fourth, the compute
    factor of the projections, whose roofline seconds `projection` are part
    of `compute` and priced at it instead (absorb_projection_compute)."""
    if len(factors) == 4:
        mem_eff, comp_eff, overhead, proj_eff = factors
        return combine(memory / mem_eff, (compute - projection) / comp_eff + projection / proj_eff) + overhead
    mem_eff, comp_eff, overhead = factors
    return combine(memory / mem_eff, compute / comp_eff) + overhead


def msle(memory, compute, measured, factors):
    return float(np.mean(np.log(predict(memory, compute, factors) / measured) ** 2))


def grid_search(memory, compute, measured, mem_grid, comp_grid, overhead_grid):
    """Best (memory, compute, overhead) on the product grid, vectorized over overheads."""
    best = (np.inf, None)
    log_meas = np.log(measured)[:, None]
    for m in mem_grid:
        for c in comp_grid:
            roof = combine(memory / m, compute / c)[:, None]
            err = np.mean((np.log(roof + overhead_grid[None, :]) - log_meas) ** 2, axis=0)
            k = int(np.argmin(err))
            if err[k] < best[0]:
                best = (float(err[k]), (float(m), float(c), float(overhead_grid[k])))
    return best


def fit_path_split(memory, compute, measured, projection, max_compute=1.0):
    """(msle, (memory, compute, overhead, projection compute)) on a grid."""
    best = (np.inf, None)
    log_meas = np.log(measured)[:, None]
    overheads = np.linspace(0.0, 600e-6, 301)
    for m in np.linspace(0.04, 1.0, 25):
        for c in np.linspace(max_compute / 60, max_compute, 60):
            for cp in np.linspace(0.02, 1.0, 50):
                roof = combine(memory / m, (compute - projection) / c + projection / cp)[:, None]
                err = np.mean((np.log(roof + overheads[None, :]) - log_meas) ** 2, axis=0)
                k = int(np.argmin(err))
                if err[k] < best[0]:
                    best = (float(err[k]), (float(m), float(c), float(overheads[k]), float(cp)))
    return best


def fit_path(memory, compute, measured, max_compute=1.0):
    step = max_compute / 100
    coarse = grid_search(memory, compute, measured, np.linspace(0.02, 1.0, 50),
                         np.linspace(step, max_compute, 100), np.linspace(0.0, 600e-6, 601))
    m, c, o = coarse[1]
    fine = grid_search(memory, compute, measured,
                       np.clip(np.linspace(m - 0.02, m + 0.02, 41), 0.005, 1.0),
                       np.clip(np.linspace(c - step, c + step, 41), step / 5, max_compute),
                       np.clip(np.linspace(o - 2e-6, o + 2e-6, 41), 0.0, None))
    return fine if fine[0] <= coarse[0] else coarse


def summary(rows, factors):
    """AUTO's verdicts with these factors against the measured times."""
    pred, meas = {}, {}
    for p in PATHS:
        memory, compute, measured = roofline_terms(rows, p)
        pred[p] = predict(memory, compute, factors[p], projection_seconds(rows) if len(factors[p]) == 4 else None)
        meas[p] = measured
    # predict_cost breaks a tie towards absorb
    picks_gqa = pred["gqa"] < pred["absorb"]
    best_gqa = meas["gqa"] <= meas["absorb"]
    picked = np.where(picks_gqa, meas["gqa"], meas["absorb"])
    best = np.minimum(meas["gqa"], meas["absorb"])
    regret = picked / best - 1.0
    within = np.concatenate([np.abs(pred[p] / meas[p] - 1.0) <= 0.35 for p in PATHS])
    return {
        "cases": len(rows),
        "fraction": float(np.mean(picks_gqa == best_gqa)),
        "mean_regret": float(np.mean(regret)),
        "max_regret": float(np.max(regret)),
        "pred_within_35pct": float(np.mean(within)),
    }


def parse_factors(text):
    """'mg,ma,cg,ca,og_us,oa_us' -> per-path (memory, compute, overhead_s)."""
    v = [float(x) for x in text.split(",")]
    if len(v) != 6:
        sys.exit("--old wants 6 numbers: memory gqa, memory absorb, compute gqa, compute absorb, "
                 "overhead gqa (us), overhead absorb (us)")
    return {"gqa": (v[0], v[2], v[4] * 1e-6), "absorb": (v[1], v[3], v[5] * 1e-6)}


def main():
    global READ_CAP_GBPS, SERIAL_SHARE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--old", help="factors to compare against: mg,ma,cg,ca,og_us,oa_us")
    ap.add_argument("--serial-share", type=float, default=0.0, help="share of the smaller term added (0..1)")
    ap.add_argument("--read-cap-gbps", type=float, default=None, help="price reads at min(read_gbps, this)")
    ap.add_argument("--max-compute", type=float, default=1.0,
                    help="largest compute factor searched (above 1 for matrix units that outrun the FMA peak, "
                         "e.g. AMX tiles)")
    ap.add_argument("--keep-gqa", help="GQA-path factors to keep instead of fitting them: memory,compute,overhead_us")
    ap.add_argument("--split-projection", action="store_true",
                    help="fit the absorb projections' compute factor apart (absorb_projection_compute; needs "
                         "flops_absorb_projection in the rows)")
    args = ap.parse_args()
    READ_CAP_GBPS, SERIAL_SHARE = args.read_cap_gbps, args.serial_share
    files = [load_rows(path) for path in args.results]
    doc = files[0][0]
    rows = [r for _, file_rows in files for r in file_rows]

    fitted = {}
    out = {"device": doc.get("device"), "dtype": doc.get("dtype"), "paths": {}}
    for p in PATHS:
        if p == "gqa" and args.keep_gqa:
            m, c, o = (float(x) for x in args.keep_gqa.split(","))
            factors = (m, c, o * 1e-6)
            err = msle(*roofline_terms(rows, p), factors)
        elif p == "absorb" and args.split_projection:
            err, factors = fit_path_split(*roofline_terms(rows, p), projection_seconds(rows),
                                          max_compute=args.max_compute)
        else:
            err, factors = fit_path(*roofline_terms(rows, p), max_compute=args.max_compute)
        fitted[p] = factors
        out["paths"][p] = {"memory": round(factors[0], 4), "compute": round(factors[1], 4),
                           "overhead_us": round(factors[2] * 1e6, 2), "msle": round(err, 5)}
        if len(factors) == 4:
            out["paths"][p]["projection_compute"] = round(factors[3], 4)
    out["fitted"] = summary(rows, fitted)
    if len(files) > 1:
        out["fitted_per_file"] = {path: summary(file_rows, fitted) for path, (_, file_rows) in zip(args.results, files)}
    if args.old:
        out["old"] = summary(rows, parse_factors(args.old))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
