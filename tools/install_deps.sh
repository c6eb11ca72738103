#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages gqla builds and tests with, when any is
# missing. Shared by tools/demo.sh and tools/test.sh so that both work on a
# fresh machine.
set -euo pipefail

packages=(libdnnl-dev doctest-dev pybind11-dev python3-numpy python3-pytest libdlpack-dev bindgen
          cmake ninja-build g++ pkg-config python3-dev)
# The wheel test builds a wheel offline (pip, setuptools, wheel) and installs
# it into a fresh venv; bench/plot.py and its test draw with matplotlib.
packages+=(python3-pip python3-setuptools python3-wheel python3-venv python3-matplotlib)
# The fuzzing and ThreadSanitizer stages build with clang-14: libclang-rt-14-dev
# holds its sanitizer and libFuzzer runtimes (libclang_rt.fuzzer*.a, tsan),
# libomp-dev the OpenMP runtime clang links.
packages+=(clang libclang-rt-14-dev libomp-dev)
# tools/check_format.sh (a stage of tools/test.sh) checks the sources with clang-format.
packages+=(clang-format)
# tools/test.sh compiles through ccache, so that the install tests' fresh
# Release builds reuse the objects of the Release build it made first.
packages+=(ccache)
# The Rust stage of tools/test.sh needs cargo: Debian's where none is on
# PATH (nor a rustup one under ~/.cargo/bin, which tools/test.sh also finds).
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then packages+=(cargo); fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "dependencies: all ${#packages[@]} Debian packages present"
  exit 0
fi
echo "dependencies: installing missing packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "${packages[@]}"
