#!/usr/bin/env bash
# Builds the C ABI and its thread test with ThreadSanitizer and runs the test
# on a fresh kernel cache, so that the eight threads really compile at once
# (attnc.h's thread-safety contract). Not in CI: the instrumented build takes
# about 25 minutes on two cores.
# Usage: scripts/tsan.sh   (build folder: build-tsan)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/bootstrap.sh"
build="$root/build-tsan"
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_C_FLAGS="-fsanitize=thread" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
    -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py
fi
ninja -C "$build" -j "${ATTNC_JOBS:-2}" attnc-capi-threads-tests
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
# halt_on_error: a race fails the run instead of scrolling past.
ATTNC_CACHE_DIR="$cache" TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  "$build/test/attnc-capi-threads-tests"
