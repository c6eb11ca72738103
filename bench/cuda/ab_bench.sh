#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B of gqla-bench on one GPU in one call: this tree against another source
# tree (e.g. the last release, unpacked with `git archive REV | tar -x -C DIR`).
# Builds both (in parallel), then runs the GPU bench rows of run_on_gpu.sh
# with the two builds alternating for ROUNDS rounds, and prints per row the
# median device time of each and their ratio (this tree / baseline): the
# card's speed drifts between calls, so only ratios from one call mean much.
# Usage: bench/cuda/ab_bench.sh BASELINE_SRC [ROUNDS]   (logs under $OUT or ./gpu-out)
# AB_ROWS="args;args;..." replaces the default rows; AB_BENCH_ARGS adds
# options to every run (e.g. --no-check: accuracy is the tests' job).
set -uo pipefail
baseline_src=$(cd "$1" && pwd)
rounds=${2:-3}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
doctest_opt=()
[ -d .carry/doctest ] && doctest_opt=(-Ddoctest_DIR=$PWD/.carry/doctest/lib/cmake/doctest)
configure() {  # configure SRC BUILD
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGQLA_WITH_ONEDNN=OFF -DGQLA_WITH_CUDA=ON \
    -DGQLA_CUDA_ARCHS=90 -DGQLA_BUILD_PYTHON=OFF "${doctest_opt[@]}" >"$out/configure-$(basename "$2").log" 2>&1
}
start=$(date +%s)
configure . build-ab-new && configure "$baseline_src" build-ab-old || { echo "configure failed"; exit 1; }
jobs=$(( $(nproc) / 2 ))
cmake --build build-ab-new --target gqla-bench gqla_cuda --parallel "$jobs" >"$out/build-new.log" 2>&1 &
cmake --build build-ab-old --target gqla-bench gqla_cuda --parallel "$jobs" >"$out/build-old.log" 2>&1 &
wait
[ -x build-ab-new/bench/gqla-bench ] && [ -x build-ab-old/bench/gqla-bench ] || { echo "build failed"; tail -20 "$out"/build-*.log; exit 1; }
echo "builds: $(( $(date +%s) - start )) s"

IFS=';' read -r -a rows <<<"${AB_ROWS:-}"
[ ${#rows[@]} -gt 0 ] || rows=(
  "--preset llama3-8b --batch 64 --context 4096"
  "--preset llama3-8b --batch 128 --context 8192"
  "--preset llama3-8b --batch 1 --context 1024,32768"
  "--preset llama3-8b-gqla --path both --batch 16,64 --context 4096"
  "--preset llama3-8b --batch 16,64 --context 4096 --s-q 4,8"
  "--preset llama3-8b-gqla,deepseek-v3 --path absorb --batch 64 --context 16384"
  "--preset deepseek-v3 --path absorb --batch 1,8 --context 4096"
)
: >"$out/ab.jsonl"
for round in $(seq "$rounds"); do
  for side in new old; do
    for row in "${rows[@]}"; do
      # shellcheck disable=SC2086
      timeout 120 "build-ab-$side/bench/gqla-bench" --device cuda --io bf16 $row ${AB_BENCH_ARGS:-} --json 2>>"$out/ab.err" |
        sed "s/^{/{\"ab_side\": \"$side\", \"ab_round\": $round, /" >>"$out/ab.jsonl"
    done
  done
done
python3 - "$out/ab.jsonl" <<'PY'
import json, statistics, sys
from collections import defaultdict
t = defaultdict(lambda: defaultdict(list))
err = {}
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "ms" not in r:
        continue
    key = (r.get("preset", ""), r["path"], r.get("dtype", ""), r["batch"], r["context"], r.get("s_q", 1))
    t[key][r["ab_side"]].append((r.get("device_ms") or r["ms"]) * 1e3)
    err[key] = max(err.get(key, 0), r.get("rel_err") or 0)  # null with --no-check
print(f"{'preset':<16}{'path':<10}{'dtype':<9}{'B':>4}{'T':>7}{'s_q':>6}{'new_us':>9}{'old_us':>9}{'new/old':>9}{'rel_err':>9}")
worst = 0
for key, sides in t.items():
    if not sides["new"] or not sides["old"]:
        continue
    n, o = statistics.median(sides["new"]), statistics.median(sides["old"])
    worst = max(worst, n / o)
    print(f"{key[0]:<16}{key[1]:<10}{key[2]:<9}{key[3]:>4}{key[4]:>7}{key[5]:>6}{n:>9.1f}{o:>9.1f}{n / o:>9.3f}{err[key]:>9.1e}")
print(f"slowest row new/old: {worst:.3f}")
PY
