#!/usr/bin/env bash
# Builds the libFuzzer target with clang and fuzzes the front end.
# Usage: scripts/fuzz.sh [SECONDS]   (default 600). Findings land in .fuzz/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${1:-600}"
"$root/scripts/bootstrap.sh"
if ! command -v clang++-19 >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get install -y -qq clang-19 libclang-rt-19-dev >/dev/null
fi
build="$root/build-fuzz"
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
    -DATTNC_ENABLE_FUZZ=ON -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir
fi
ninja -C "$build" -j "${ATTNC_JOBS:-2}" attnc-parser-fuzzer
mkdir -p "$root/.fuzz/corpus" "$root/.fuzz/artifacts"
"$build/bin/attnc-parser-fuzzer" -max_total_time="$secs" -max_len=4096 -timeout=10 \
  -dict="$root/test/fuzz/attn.dict" -artifact_prefix="$root/.fuzz/artifacts/" \
  "$root/.fuzz/corpus" "$root/test/fuzz/corpus" "$root/examples"
