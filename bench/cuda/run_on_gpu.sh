#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One pass over everything that needs a GPU, for a machine with nvcc, CMake,
# ninja, torch and pybind11 but no oneDNN/doctest (doctest may be carried in
# .carry/doctest): build the library with the CUDA module, run the cuda-labelled
# ctest suite, the Python GPU tests, gqla-bench on the shapes of the CUDA
# targets (bf16 q and o, as the torch peer's), the torch peer on the same
# shapes, AUTO's validation grid, and prefill chunks side by side with torch.
# The Python extension is built for the `python3` on PATH (the one with torch).
# Without `test` only gqla-bench and the CUDA module are built.
# Logs go to $OUT (or ./gpu-out); a short table is printed last.
# Usage: bench/cuda/run_on_gpu.sh [test] [bench] [peer] [auto] [prefill] [sparse]   (default: all)
#   prefill: gqla-bench on prefill chunks (GQA 32/8 s_q 128/512/2048, bf16 and fp8 caches; DeepSeek-V3 and
#   LLaMA-3-8B-GQLA s_q 2048 with AUTO per call, absorb and transient; a ragged
#   1x47,2048x1 call and its two parts), the torch peer's prefill rows, and one
#   side-by-side table (prefill_table.py).
#   sparse: gqla-bench --topk 2048 of T=65536 at B=64 (DeepSeek-V3 absorb s_q 1,
#   LLaMA-3-8B-GQLA GQA path s_q 4) beside dense T=2048, and the torch
#   gather + attention peer on the same shapes (peer_sparse.py, sparse_table.py).
set -uo pipefail
what=${*:-test bench auto peer prefill sparse}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
build=${GQLA_GPU_BUILD:-build-gpu}
export PYTHONUNBUFFERED=1
doctest_opt=()
[ -d .carry/doctest ] && doctest_opt=(-Ddoctest_DIR=$PWD/.carry/doctest/lib/cmake/doctest)

start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGQLA_WITH_ONEDNN=OFF -DGQLA_WITH_CUDA=ON \
  -DGQLA_CUDA_ARCHS=90 -DPython3_EXECUTABLE="$(command -v python3)" "${doctest_opt[@]}" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
targets=(--target gqla-bench)  # the bench depends on the CUDA module
case " $what " in *" test "*) targets=() ;; esac
cmake --build "$build" "${targets[@]}" --parallel "$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

bench=$build/bench/gqla-bench
status=0
for w in $what; do
  case $w in
    test)
      timeout 600 ctest --test-dir "$build" -L cuda -j4 --output-on-failure >"$out/ctest_cuda.log" 2>&1 || status=1
      grep -E "tests passed|Failed|Skipped" "$out/ctest_cuda.log"
      PYTHONPATH=$build/bindings/python timeout 180 python3 -m pytest -q tests/python >"$out/pytest.log" 2>&1 || status=1
      tail -2 "$out/pytest.log"
      ;;
    bench)
      on_gpu=(--device cuda --io bf16)  # bf16 q and o, as the torch peer's
      {
        timeout 120 "$bench" "${on_gpu[@]}" --preset llama3-8b --batch 64 --context 4096 --json
        timeout 120 "$bench" "${on_gpu[@]}" --preset llama3-8b --batch 128 --context 8192 --json
        timeout 120 "$bench" "${on_gpu[@]}" --preset llama3-8b --batch 1 --context 1024,32768 --json
        timeout 120 "$bench" "${on_gpu[@]}" --preset llama3-8b-gqla --path both --batch 16,64 --context 4096 --json
        timeout 120 "$bench" "${on_gpu[@]}" --preset llama3-8b --batch 16,64 --context 4096 --s-q 4,8 --json
        timeout 120 "$bench" "${on_gpu[@]}" --preset llama3-8b-gqla,deepseek-v3 --path absorb --batch 64 --context 16384 \
          --dtype bf16,fp8_e4m3 --json
      } >"$out/bench.jsonl" 2>"$out/bench.err" || status=1
      ;;
    peer)
      timeout 240 python3 bench/cuda/peer_torch.py --rows decode --reps 20 --json "$out/peer.json" >"$out/peer.log" 2>&1 || status=1
      ;;
    auto)
      timeout 360 "$bench" --device cuda --validate-auto --json >"$out/validate_auto.json" 2>"$out/validate_auto.err" || status=1
      ;;
    prefill)
      on_gpu=(--device cuda --io bf16)
      {
        timeout 150 "$bench" "${on_gpu[@]}" --preset llama3-8b --batch 1 --context 4096 --s-q 128,512,2048 \
          --dtype bf16,fp8_e4m3 --json || status=1
        timeout 200 "$bench" "${on_gpu[@]}" --preset deepseek-v3,llama3-8b-gqla --path auto,absorb,transient \
          --batch 1 --context 4096 --s-q 2048 --json || status=1
        timeout 120 "$bench" "${on_gpu[@]}" --preset llama3-8b --context 4096 --q-lens 1x47,2048x1 --json || status=1
        timeout 120 "$bench" "${on_gpu[@]}" --preset llama3-8b --batch 47 --context 4096 --s-q 1 --json || status=1
      } >"$out/prefill.jsonl" 2>"$out/prefill.err"
      timeout 240 python3 bench/cuda/peer_torch.py --rows prefill --reps 20 --json "$out/peer_prefill.json" \
        >"$out/peer_prefill.log" 2>&1 || status=1
      ;;
    sparse)
      on_gpu=(--device cuda --io bf16 --topk 2048 --batch 64 --context 65536 --json)
      {
        timeout 200 "$bench" "${on_gpu[@]}" --preset deepseek-v3 --path absorb --s-q 1 || status=1
        timeout 200 "$bench" "${on_gpu[@]}" --preset llama3-8b-gqla --path gqa --s-q 4 || status=1
      } >"$out/sparse.jsonl" 2>"$out/sparse.err"
      timeout 240 python3 bench/cuda/peer_sparse.py --reps 20 --json "$out/peer_sparse.json" \
        >"$out/peer_sparse.log" 2>&1 || status=1
      ;;
  esac
done

# Short table last: gqla-bench cases (wall time of a synchronized call, and
# device time between CUDA events around it), then the torch peer, then AUTO's summary.
if [ -s "$out/bench.jsonl" ]; then
  python3 - "$out/bench.jsonl" <<'EOF'
import json, sys
print(f"{'preset':<15}{'path':<7}{'B':>4}{'T':>7}{'wall_us':>9}{'event_us':>9}{'GB/s':>9}{'roof':>7}{'rel_err':>9}")
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if r.get("ms") is None:  # skipped
        continue
    dev_ms = r.get('device_ms', r['ms'])
    sq = r.get('s_q', 1)
    print(f"{r.get('preset', r.get('kind', '')) + (f' s_q={sq}' if sq > 1 else ''):<15}{r['path']:<7}{r['batch']:>4}{r['context']:>7}"
          f"{r['ms'] * 1e3:>9.1f}{dev_ms * 1e3:>9.1f}{r['bytes'] / dev_ms / 1e6:>9.0f}"
          f"{r.get('device_roofline_frac', r['roofline_frac']) * 100:>6.0f}%{r.get('rel_err') or float('nan'):>9.1e}")
EOF
fi
[ -s "$out/peer.log" ] && grep -v "^JSON" "$out/peer.log" | tail -12
[ -s "$out/validate_auto.json" ] && python3 -c "
import json,sys; d=json.load(open('$out/validate_auto.json'))
print('validate-auto:', {k: d.get(k) for k in ('cases','correct','fraction','mean_regret','max_regret','pred_within_35pct')})
p = d.get('prefill') or {}
print('validate-auto prefill (absorb / transient / gqa kept):', {k: p.get(k) for k in ('latent_only','kept_cache')})
s = d.get('sparse') or {}
print('validate-auto sparse:', {k: s.get(k) for k in ('cases','correct','mean_regret','max_regret','latent_only')})"
if [ -s "$out/prefill.jsonl" ]; then
  [ -s "$out/prefill.err" ] && grep -v "^$" "$out/prefill.err" | head -10
  python3 bench/cuda/prefill_table.py "$out/prefill.jsonl" "$out/peer_prefill.json" | tee "$out/prefill_table.txt"
fi
[ -s "$out/sparse.jsonl" ] && python3 bench/cuda/sparse_table.py "$out/sparse.jsonl" "$out/peer_sparse.json" | tee "$out/sparse_table.txt"
exit $status
