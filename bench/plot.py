#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Charts of gqla-bench results: a roofline, and gqla against a peer.

    bench/plot.py bench/results/h200_bench.jsonl bench/results/h200_peer_torch.json \\
        --out-dir docs/img --name h200
    build/bench/gqla-bench --json > run.jsonl && bench/plot.py run.jsonl --out-dir plots

Inputs, recognised by their content (any number, mixed):
  * `gqla-bench --json`: one object per line, one per timed case;
  * `gqla-bench --validate-auto --json`: one object whose "rows" hold both
    paths of every cell (bytes, FLOPs and measured time of each);
  * a peer's rows (bench/cuda/peer_torch.py): a JSON list of
    {"name", "B", "T", "s_q", "impl", "median_us"}.

Writes <name>_roofline.png: achieved FLOP/s of every row against its
arithmetic intensity (FLOPs per byte read) under the ceilings the JSON
carries, the measured read bandwidth and compute peak of the machine; and
<name>_vs_peer.png when some row has a peer: gqla's time beside a peer
row of the same shape (path, H, G, batch, context, s_q; the fastest peer
row when there are several), else beside the bench's own naive baseline
(baseline_ms). CUDA rows are timed by events (device_ms), as the torch
peer is. --table prints the pairs as a Markdown table.

Needs matplotlib (Debian: python3-matplotlib).
"""

import argparse
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402

PATH_MARKERS = {"gqa": "o", "absorb": "^", "transient": "s"}


# ------------------------------------------------------------------ reading

def read_objects(path):
    """Every JSON value of a file: one document, or one per line."""
    with open(path) as f:
        text = f.read()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def shape_tag(row):
    """"B64 T4K s4": batch, context, s_q of a sweep row, short enough to print beside its point."""
    t = row["context"]
    context = f"{t // 1024}K" if t % 1024 == 0 else str(t)
    return f"B{row['batch']} T{context}" + (f" s{row['s_q']}" if row.get("s_q", 1) != 1 else "")


class Results:
    """Timed rows, machine ceilings and peer rows gathered from the inputs."""

    def __init__(self):
        self.points = []     # dicts: label, path, flops, bytes, seconds
        self.cases = []      # sweep rows that ran (for the peer chart)
        self.peers = []      # peer rows
        self.bandwidth_gbps = []
        self.peak_gflops = []
        self.fma_gflops = []
        self.devices = set()
        self.builds = set()  # (gqla_version, git_commit) of the rows that carry them
        self.device_timed = False

    def add(self, value):
        if isinstance(value, list):
            self.peers += [v for v in value if isinstance(v, dict) and "median_us" in v]
        elif isinstance(value, dict) and isinstance(value.get("rows"), list):
            self.add_validate_auto(value)
        elif isinstance(value, dict) and "preset" in value and "ms" in value:
            self.add_case(value)

    def note_build(self, obj):
        if "gqla_version" in obj:
            self.builds.add((obj["gqla_version"], obj.get("git_commit", "unknown")))

    def add_case(self, row):
        if row.get("ms") is None or not row.get("bytes") or not row.get("flops"):
            return  # skipped case
        ms = row.get("device_ms") or row["ms"]
        self.device_timed |= bool(row.get("device_ms"))
        self.devices.add(row.get("device", "?"))
        self.note_build(row)
        self.cases.append(dict(row, time_ms=ms))
        self.points.append({"label": row["preset"], "path": row["path"], "flops": row["flops"],
                            "bytes": row["bytes"], "seconds": ms / 1e3, "shape": shape_tag(row)})
        self.ceilings(row, "read_gbps_machine", "peak_gflops_machine", "peak_fma_gflops_machine")

    def add_validate_auto(self, obj):
        self.devices.add(obj.get("device", "?"))
        self.note_build(obj)
        self.ceilings(obj, "read_gbps_machine", "peak_gflops_machine", None)
        for row in obj["rows"]:
            for path in ("gqa", "absorb"):
                ms, nbytes, flops = row.get(f"meas_{path}_ms"), row.get(f"bytes_{path}"), row.get(f"flops_{path}")
                if ms and nbytes and flops:
                    self.points.append({"label": row["preset"], "path": path, "flops": flops,
                                        "bytes": nbytes, "seconds": ms / 1e3})

    def ceilings(self, obj, bandwidth_key, peak_key, fma_key):
        if obj.get(bandwidth_key):
            self.bandwidth_gbps.append(obj[bandwidth_key])
        if obj.get(peak_key):
            self.peak_gflops.append(obj[peak_key])
        if fma_key and obj.get(fma_key):
            self.fma_gflops.append(obj[fma_key])

    def title(self, name=None):
        """`name` (--title) or the device, and the gqla builds the rows name."""
        devices = name or "/".join(sorted(self.devices))
        builds = ", ".join(f"gqla {v} @ {c[:10]}" for v, c in sorted(self.builds))
        return f"{devices}" + (f" ({builds})" if builds else "")


# ------------------------------------------------------------------ roofline

def rate_unit(peak_gflops):
    return ("TFLOP/s", 1e12) if peak_gflops >= 1000 else ("GFLOP/s", 1e9)


def name_points(ax, points, scale):
    """Writes each point's shape beside it, moving a name up or down until it
    covers no marker and no name written before (shapes of one family cluster)."""
    ax.set_ylim(ax.get_ylim())  # freeze the limits the pixel positions depend on
    px_per_pt = ax.figure.dpi / 72
    fontsize = 6

    def xy(p):
        return p["flops"] / p["bytes"], p["flops"] / p["seconds"] / scale

    def overlaps(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    markers = [ax.transData.transform(xy(p)) for p in points]
    taken = [(mx - 4, my - 4, mx + 4, my + 4) for mx, my in markers]  # display pixels
    for p in sorted(points, key=lambda p: xy(p)):
        px, py = ax.transData.transform(xy(p))
        width = 0.62 * fontsize * len(p["shape"]) * px_per_pt
        half_height = 0.6 * fontsize * px_per_pt
        # Right of the marker, else left of it, each nearest first.
        for dy in (-3, 4, -10, 11, -17, 18, -24, 25):
            for side in (1, -1):
                centre = py + dy * px_per_pt
                near = px + side * 5 * px_per_pt
                box = (min(near, near + side * width), centre - half_height,
                       max(near, near + side * width), centre + half_height)
                if not any(overlaps(box, t) for t in taken):
                    break
            else:
                continue
            break
        taken.append(box)
        ax.annotate(p["shape"], xy(p), xytext=(5 * side, dy), textcoords="offset points", va="center",
                    ha="left" if side > 0 else "right", fontsize=fontsize, color="0.3")


def plot_roofline(results, out_path, title):
    if not results.bandwidth_gbps or not results.peak_gflops:
        missing = [k for k, v in (("read_gbps_machine", results.bandwidth_gbps),
                                  ("peak_gflops_machine", results.peak_gflops)) if not v]
        sys.exit(f"plot.py: no machine ceilings in the inputs (missing {', '.join(missing)})")
    bandwidth = statistics.median(results.bandwidth_gbps) * 1e9   # bytes/s
    peak = statistics.median(results.peak_gflops) * 1e9           # FLOP/s
    unit, scale = rate_unit(peak / 1e9)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)

    intensities = [p["flops"] / p["bytes"] for p in results.points]
    lo = min(intensities) / 2
    hi = max(max(intensities) * 2, peak / bandwidth * 4)
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(bandwidth * x, peak) / scale for x in xs], color="black", lw=2,
            label=f"roof: {bandwidth / 1e9:.0f} GB/s read, {peak / scale:.3g} {unit} peak")
    ax.plot(xs, [0.5 * min(bandwidth * x, peak) / scale for x in xs], color="black", lw=1, ls=":",
            label="50% of the roof")
    if results.fma_gflops:
        fma = statistics.median(results.fma_gflops) * 1e9
        if fma < 0.9 * peak:
            ax.plot(xs, [min(bandwidth * x, fma) / scale for x in xs], color="gray", lw=1, ls="--",
                    label=f"FMA (non-tensor) peak {fma / scale:.3g} {unit}")

    groups = {}
    for p in results.points:
        groups.setdefault((p["label"], p["path"]), []).append(p)
    colors = {}
    for (label, path), points in sorted(groups.items()):
        color = colors.setdefault(label, f"C{len(colors)}")
        ax.scatter([p["flops"] / p["bytes"] for p in points], [p["flops"] / p["seconds"] / scale for p in points],
                   color=color, marker=PATH_MARKERS.get(path, "D"), s=36, alpha=0.8, edgecolor="white",
                   linewidth=0.5, label=f"{label}, {path} path", zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    if len(results.points) <= 20:  # few enough to name each one's shape
        name_points(ax, [p for p in results.points if p.get("shape")], scale)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte read)")
    ax.set_ylabel(f"achieved {unit}" + (" (CUDA events)" if results.device_timed else ""))
    ax.set_title(f"Decode attention against the measured roofline: {results.title(title)}", fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(out_path)
    plt.close(fig)
    fractions = [max(p["bytes"] / bandwidth, p["flops"] / peak) / p["seconds"] for p in results.points]
    print(f"{out_path}: {len(results.points)} points; roof {bandwidth / 1e9:.0f} GB/s, {peak / scale:.3g} {unit}; "
          f"roofline fraction median {statistics.median(fractions):.0%}, best {max(fractions):.0%}")


# ------------------------------------------------------------------ gqla vs a peer

def peer_shape(name):
    """(path, H, G) of a peer row's name: "gqa 32/8 D128", "absorb H128 G128 ..."; None otherwise."""
    if "ragged" in name:
        return None
    m = re.match(r"gqa (\d+)/(\d+)\b", name)
    if m:
        return "gqa", int(m.group(1)), int(m.group(2))
    m = re.match(r"absorb H(\d+) G(\d+)\b", name)
    if m:
        return "absorb", int(m.group(1)), int(m.group(2))
    return None


def case_label(case):
    shape = f"GQA {case['H']}/{case['G']}" if case["kind"] == "gqa" else f"{case['preset']} {case['path']}"
    s_q = f" s_q={case['s_q']}" if case["s_q"] != 1 else ""
    return f"{shape} B={case['batch']} T={case['context']}{s_q}"


def peer_pairs(results):
    """[(label, gqla ms, peer ms, peer name)]: torch peer rows when given, else naive baselines."""
    pairs = []
    if results.peers:
        fastest = {}
        for peer in results.peers:
            shape = peer_shape(peer.get("name", ""))
            if shape is None or not peer.get("median_us") or peer.get("kind", "decode") != "decode":
                continue
            key = shape + (peer["B"], peer["T"], peer["s_q"])
            if key not in fastest or peer["median_us"] < fastest[key]["median_us"]:
                fastest[key] = peer
        for case in results.cases:
            key = (case["path"], case["H"], case["G"], case["batch"], case["context"], case["s_q"])
            peer = fastest.pop(key, None)  # the first gqla row of a shape is paired
            if peer:
                pairs.append((case_label(case), case["time_ms"], peer["median_us"] / 1e3, peer["impl"]))
        return pairs, "torch"
    for case in results.cases:
        if case.get("baseline_ms"):
            pairs.append((case_label(case), case["time_ms"], case["baseline_ms"], "naive"))
    return pairs, "naive baseline"


def plot_vs_peer(pairs, peer_kind, results, out_path, title):
    unit, scale = ("µs", 1e3) if max(g for _, g, _, _ in pairs) < 5 else ("ms", 1.0)
    height = 1.2 + 0.42 * len(pairs)
    fig, ax = plt.subplots(figsize=(8, height), dpi=100)
    ys = range(len(pairs))
    ax.barh([y - 0.2 for y in ys], [g * scale for _, g, _, _ in pairs], height=0.4, color="C0", label="gqla")
    ax.barh([y + 0.2 for y in ys], [p * scale for _, _, p, _ in pairs], height=0.4, color="0.6", label=peer_kind)
    for y, (_, g, p, _) in zip(ys, pairs):
        ax.text(max(g, p) * scale * 1.08, y, f"{p / g:.2f}x", va="center", fontsize=8)
    ax.set_yticks(list(ys))
    ax.set_yticklabels([label for label, _, _, _ in pairs], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    right = max(max(g, p) for _, g, p, _ in pairs) * scale
    ax.set_xlim(right=right * 2)
    timing = "CUDA events" if results.device_timed else "wall time"
    ax.set_xlabel(f"{unit} per call ({timing}; shorter is better; label: {peer_kind} time / gqla time)")
    ax.set_title(f"gqla vs {peer_kind}: {results.title(title)}", fontsize=10, loc="left")
    ax.grid(True, axis="x", which="both", alpha=0.25)
    # Above the axes, beside the title: inside, it would cover the ratio labels.
    ax.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(out_path, bbox_inches="tight")
    plt.close(fig)
    speedups = [p / g for _, g, p, _ in pairs]
    print(f"{out_path}: {len(pairs)} shapes against {peer_kind}; gqla faster in "
          f"{sum(s > 1 for s in speedups)}, speedup {min(speedups):.2f}x to {max(speedups):.2f}x")


def print_table(pairs, peer_kind):
    unit, scale = ("µs", 1e3) if max(g for _, g, _, _ in pairs) < 5 else ("ms", 1.0)
    print(f"| shape | gqla {unit} | {peer_kind} {unit} | {peer_kind} / gqla |")
    print("|---|---|---|---|")
    for label, g, p, who in pairs:
        print(f"| {label} | {g * scale:.1f} | {p * scale:.1f} ({who}) | {p / g:.2f}x |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="bench JSON / JSON Lines files")
    parser.add_argument("--out-dir", default=".", help="where the PNG files go (default .)")
    parser.add_argument("--name", default="bench", help="file name prefix (default bench)")
    parser.add_argument("--title", help="names the machine in the chart titles (default: the JSON's device)")
    parser.add_argument("--table", action="store_true", help="print the gqla/peer pairs as a Markdown table")
    args = parser.parse_args()

    results = Results()
    for path in args.inputs:
        for value in read_objects(path):
            results.add(value)
    if not results.points:
        sys.exit("plot.py: no timed rows in the inputs")
    os.makedirs(args.out_dir, exist_ok=True)
    plot_roofline(results, os.path.join(args.out_dir, f"{args.name}_roofline.png"), args.title)
    pairs, peer_kind = peer_pairs(results)
    if pairs:
        plot_vs_peer(pairs, peer_kind, results, os.path.join(args.out_dir, f"{args.name}_vs_peer.png"), args.title)
        if args.table:
            print_table(pairs, peer_kind)
    else:
        print("no peer chart: no row has a peer (a torch peer JSON or baseline_ms)")


if __name__ == "__main__":
    main()
