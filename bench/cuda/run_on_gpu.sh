#!/usr/bin/env bash
# Builds the CUDA module, its tests and the kernel bench on a GPU machine that
# has nvcc/CMake/ninja but no oneDNN/doctest (doctest may be carried in
# .carry/doctest), runs the tests, the bench and the torch peer, and leaves
# logs in $OUT (or ./gpu-out). Usage: bench/cuda/run_on_gpu.sh [test|bench|peer|all]...
set -uo pipefail
what=${*:-all}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
build=${GQLA_GPU_BUILD:-build-gpu}
doctest_opt=()
[ -d .carry/doctest ] && doctest_opt=(-Ddoctest_DIR=$PWD/.carry/doctest/lib/cmake/doctest)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGQLA_WITH_ONEDNN=OFF -DGQLA_WITH_CUDA=ON \
    -DGQLA_BUILD_PYTHON=OFF -DGQLA_BUILD_EXAMPLES=OFF -DGQLA_BUILD_TOOLS=OFF "${doctest_opt[@]}" >"$out/configure.log" 2>&1 \
    || { tail -30 "$out/configure.log"; exit 1; }
fi
start=$(date +%s)
ninja -C "$build" gqla_cuda gqla_cuda_backend_test gqla_cuda_kernel_bench >"$out/build.log" 2>&1 \
  || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
status=0
for w in $what; do
  case $w in
    test|all) timeout 300 "$build/tests/cuda/gqla_cuda_backend_test" 2>&1 | tee "$out/test.log" | grep -v "^ok" ; status=${PIPESTATUS[0]} ;;&
    bench|all) timeout 300 "$build/tests/cuda/gqla_cuda_kernel_bench" ${GQLA_BENCH_REPS:-50} ${GQLA_BENCH_ONLY:-} 2>&1 | tee "$out/bench.log" | grep -v JSON ;;&
    peer|all) PYTHONUNBUFFERED=1 timeout 300 python3 bench/cuda/peer_torch.py 2>&1 | tee "$out/peer.log" | grep -v JSON ;;
  esac
done
exit $status
