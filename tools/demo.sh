#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's first command: build gqla (Release, in build/) and run the demo.
# Works on a fresh Debian 12 machine: missing packages are installed first.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install_deps.sh

generator=()
if [ ! -f build/CMakeCache.txt ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build build --parallel "$(nproc)" --target gqla-demo
exec build/tools/demo/gqla-demo "$@"
