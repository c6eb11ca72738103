# SPDX-License-Identifier: Apache-2.0
"""bench/plot.py on what gqla-bench writes (ctest gqla.bench.plot):

  1. a short CPU sweep with the naive baseline, `--json --quiet`: every line
     names the gqla version and the git commit, stderr stays empty;
  2. plot.py on it: a roofline and a gqla-vs-naive chart;
  3. plot.py on the committed H200 results with the torch peer (every peer
     shape paired) and on the committed CPU --validate-auto object.
Each chart must be a PNG of sensible size. Needs matplotlib (Debian:
python3-matplotlib, installed by tools/install_deps.sh).

usage: plot_check.py --bench GQLA_BENCH --plot PLOT_PY --results DIR --work-dir DIR --version X.Y.Z
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAILED ({result.returncode}): {' '.join(command)}\n{result.stdout}\n{result.stderr}")
    return result


def check_png(path, min_bytes=10_000, max_bytes=400_000):
    """A PNG whose pixel size and file size are those of a readable chart."""
    with open(path, "rb") as f:
        header = f.read(24)
    if header[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path} is not a PNG")
    width, height = struct.unpack(">II", header[16:24])
    size = os.path.getsize(path)
    if not (600 <= width <= 1600 and 300 <= height <= 1600 and min_bytes <= size <= max_bytes):
        sys.exit(f"{path}: {width}x{height} px, {size} bytes")
    return f"{os.path.basename(path)} {width}x{height} {size // 1024} KiB"


def plot(args, inputs, name, expect_peer_line):
    out = run([sys.executable, args.plot, *inputs, "--out-dir", args.work_dir, "--name", name]).stdout
    if expect_peer_line not in out:
        sys.exit(f"plot.py on {inputs} printed no '{expect_peer_line}':\n{out}")
    charts = [check_png(os.path.join(args.work_dir, f"{name}_roofline.png"))]
    if os.path.exists(os.path.join(args.work_dir, f"{name}_vs_peer.png")):
        charts.append(check_png(os.path.join(args.work_dir, f"{name}_vs_peer.png")))
    print(f"{name}: {', '.join(charts)}")


def main():
    parser = argparse.ArgumentParser()
    for name in ("--bench", "--plot", "--results", "--work-dir", "--version"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    try:
        import matplotlib  # noqa: F401  (plot.py runs under this interpreter)
    except ImportError:
        sys.exit(f"{sys.executable} has no matplotlib: apt install python3-matplotlib (tools/install_deps.sh)")
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)

    sweep = run([args.bench, "--device", "cpu", "--preset", "llama3-8b-gqla,llama3-8b", "--batch", "1,2",
                 "--context", "256", "--reps", "3", "--hot", "--no-check", "--json", "--quiet"])
    if sweep.stderr:
        sys.exit(f"--quiet run wrote to stderr:\n{sweep.stderr}")
    rows = [json.loads(line) for line in sweep.stdout.splitlines()]
    for row in rows:
        if row.get("gqla_version") != args.version or not row.get("git_commit") or "git_dirty" not in row:
            sys.exit(f"row without gqla_version {args.version} / git_commit / git_dirty: {row}")
    jsonl = os.path.join(args.work_dir, "cpu_sweep.jsonl")
    with open(jsonl, "w") as f:
        f.write(sweep.stdout)

    plot(args, [jsonl], "sweep", f"{len(rows)} shapes against naive baseline")
    plot(args, [os.path.join(args.results, "h200_bench.jsonl"), os.path.join(args.results, "h200_peer_torch.json")],
         "h200", "10 shapes against torch")
    plot(args, [os.path.join(args.results, "cpu_validate_auto.json")], "cpu_validate", "no peer chart")
    shutil.rmtree(args.work_dir)


if __name__ == "__main__":
    main()
