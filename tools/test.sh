#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's second command: everything that checks gqla, from a fresh clone.
#   1. missing Debian packages; format   4. sanitizer build (clang, ASan + UBSan, build-asan/) + ctest
#      (tools/check_format.sh)
#   2. Release build (gcc, build/)       5. fuzzers from build-asan/: API sequences (60 s),
#   3. ctest (cuda tests skip w/o GPU)      libFuzzer (fixed inputs), fixed seeds
#                                        6. ThreadSanitizer: the thread tests (clang, build-tsan/)
#                                        7. pytest (Python bindings, from build/)
#                                        8. cargo test + the Rust example (against build/)
# A failed install/configure/build stops the run (later stages need it); a
# failed test stage is recorded and the remaining test stages still run. The
# ThreadSanitizer build of stage 6 only gates its own stage.
# Prints the time of every stage and ends with a summary line; exits
# non-zero when anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)
total_start=$(date +%s)
summary=()
failed=0

summarize() {  # the stage list, then one final verdict line
  local verdict=$1 ok=0 bad=0 line
  echo
  echo "Stages:"
  for line in "${summary[@]}"; do
    echo "  $line"
    case $line in ok*) ok=$((ok + 1));; FAILED*) bad=$((bad + 1));; esac
  done
  echo "$verdict in $(( $(date +%s) - total_start ))s"
  echo "stages: $ok passed, $bad failed"
}

run_stage() {  # run_stage NAME COMMAND...: run and time; returns the command's status
  local name=$1; shift
  local start=$(date +%s) rc=0
  echo
  echo "==> $name"
  "$@" || rc=$?
  local took=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    echo "<== $name: ok (${took}s)"
    summary+=("ok      ${took}s  $name")
  else
    echo "<== $name: FAILED with exit code $rc (${took}s)"
    summary+=("FAILED  ${took}s  $name (exit code $rc)")
  fi
  return $rc
}

must() {  # a stage everything after it depends on
  if ! run_stage "$@"; then
    summarize "FAILED (stopped after '$1')"
    exit 1
  fi
}

check() {  # a test stage: record a failure, keep going
  run_stage "$@" || failed=1
}

configure() {  # configure DIR ARGS...: Ninja for a new build dir, keep what an existing one uses
  local dir=$1; shift
  local generator=()
  if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
  cmake -S . -B "$dir" "${generator[@]}" "$@"
}

# rustup installs cargo under ~/.cargo/bin, which non-login shells may not have on PATH.
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi

cuda_flag=OFF
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then cuda_flag=ON; fi

must "dependencies" tools/install_deps.sh
check "format (clang-format, .clang-format)" tools/check_format.sh
# The Release build compiles through ccache: gqla.install.multiarch (a test of
# that build) configures and builds the same sources with the same flags
# again, and takes the objects from the cache instead of compiling them a
# second time. The cache lives in the tree (build-ccache/) unless CCACHE_DIR
# names another; the sanitizer and clang builds share no flags with it and
# compile directly.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$root/build-ccache}
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
must "configure Release (CUDA module $cuda_flag)" \
  configure build -DCMAKE_BUILD_TYPE=Release -DGQLA_WITH_CUDA=$cuda_flag -DGQLA_CUDA_ARCHS=90 "${launcher[@]}"
must "build Release" cmake --build build --parallel "$jobs"
check "ctest Release" ctest --test-dir build --no-tests=error --output-on-failure --parallel "$jobs"

# The clang builds keep line tables only (-gline-tables-only): enough for
# file:line in every report, and their compiles take ~25% less time than
# with full debug information. CUDA, Python (and for ThreadSanitizer the
# tools and examples) are off.
clang_flags="-O2 -gline-tables-only -DNDEBUG"
clang_build=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
             -DCMAKE_C_FLAGS_RELWITHDEBINFO="$clang_flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$clang_flags"
             -DGQLA_WITH_CUDA=OFF -DGQLA_BUILD_PYTHON=OFF)

# One ASan + UBSan build serves the sanitizer ctest and both fuzzers: built
# by clang, the library's objects with libFuzzer's coverage instrumentation
# (GQLA_LIBFUZZER), so the libFuzzer harness links against the same objects.
# A separate gcc sanitizer build and clang libFuzzer build cost about 400 +
# 160 s on 2 cores; this one ~230 s.
must "configure sanitizers (clang, ASan+UBSan, libFuzzer coverage)" \
  configure build-asan "${clang_build[@]}" -DGQLA_SANITIZE=ON -DGQLA_LIBFUZZER=ON
must "build sanitizers" cmake --build build-asan --parallel "$jobs"
# The install test builds out-of-tree consumers without the sanitizer
# flags (they could not link the instrumented library); it ran above.
check "ctest sanitizers" env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --no-tests=error --output-on-failure --parallel "$jobs" --label-exclude 'install|fuzz'
check "fuzz api-sequence (ASan+UBSan, 60 s)" env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --no-tests=error --output-on-failure --label-regex fuzz

# A fixed seed and a fixed number of inputs (not a time limit), starting from
# an empty scratch corpus: every machine runs the same inputs, so this stage
# cannot turn red by chance on a faster or slower machine. The kernels differ
# per ISA, so besides the host's widest table the run repeats with the ISA
# capped (GQLA_MAX_ISA) at AVX2 and at the scalar fallback: a CI host of
# another CPU generation then runs exactly what a developer ran. About 110 s
# on 2 cores; the time limit only guards against a hang.
run_libfuzzer() {  # run_libfuzzer ISA_CAP RUNS (cap "host": none); new inputs go to build-asan/, never the repo
  local cap=$1 runs=$2 found=build-asan/fuzz-corpus-$1 artifacts=build-asan/fuzz-artifacts-$1/
  local max_isa=$cap
  if [ "$cap" = host ]; then max_isa=; fi
  rm -rf "$found" && mkdir -p "$found" "$artifacts"
  env GQLA_MAX_ISA="$max_isa" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    build-asan/tests/fuzz/gqla_capi_libfuzzer -runs="$runs" -max_total_time=240 -seed=1 -print_final_stats=1 \
    -artifact_prefix="$artifacts" "$found" tests/fuzz/corpus
}
libfuzzer_all_isas() {  # every "cap:runs" of libfuzzer_plan; fails if any run fails
  local entry status=0
  for entry in "${libfuzzer_plan[@]}"; do
    echo "--- libFuzzer, GQLA_MAX_ISA=${entry%%:*}, ${entry##*:} inputs ---"
    run_libfuzzer "${entry%%:*}" "${entry##*:}" || status=1
  done
  return $status
}
libfuzzer_plan=(host:5000 avx2:2500 none:2500)
check "libFuzzer (5000 + 2x2500 inputs: host ISA, AVX2, scalar)" libfuzzer_all_isas

# TSan sees through gqla's own threads and locks; tests/tsan.supp names the
# uninstrumented OpenMP runtimes (see there).
if run_stage "configure ThreadSanitizer (clang)" configure build-tsan "${clang_build[@]}" -DGQLA_TSAN=ON \
     -DGQLA_BUILD_TOOLS=OFF -DGQLA_BUILD_EXAMPLES=OFF &&
   run_stage "build ThreadSanitizer" cmake --build build-tsan --parallel "$jobs" --target gqla_thread_tests; then
  check "ThreadSanitizer" \
    env TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$root/tests/tsan.supp" \
    build-tsan/tests/abi/gqla_thread_tests --test-case='threads: *'
else
  failed=1
fi

check "pytest" env PYTHONPATH="$root/build/bindings/python" /usr/bin/python3 -m pytest -q tests/python
check "cargo test (bindings/rust)" env GQLA_LIB_DIR="$root/build/capi" \
  cargo test --offline --no-fail-fast --manifest-path bindings/rust/Cargo.toml
check "cargo run (examples/rust)" env GQLA_LIB_DIR="$root/build/capi" \
  cargo run --offline --manifest-path examples/rust/Cargo.toml

if [ $failed -ne 0 ]; then
  summarize "FAILED"
  exit 1
fi
summarize "all stages passed"
