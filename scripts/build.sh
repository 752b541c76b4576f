#!/usr/bin/env bash
# Installs missing packages, then configures (once) and builds incrementally.
# Usage: scripts/build.sh [BUILD_DIR]   (default: build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"

"$root/scripts/bootstrap.sh"

if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py
fi
# Two cores on the reference machine; MLIR translation units are heavy.
ninja -C "$build" -j "${ATTNC_JOBS:-2}"
