#!/usr/bin/env bash
# The exhaustive matrices CI leaves out (docs/decisions.md, Testing): every
# arch x dtype of the CUDA LSH kernels' NVRTC builds (CI runs each arch's
# fp16 and every dtype on sm_80). Builds first; about 10 minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
"$root/scripts/build.sh" "$build"
ninja -C "$build" -j "${ATTNC_JOBS:-2}" attnc-cuda-lsh-tests
ATTNC_LONG_TESTS=1 "$build/test/attnc-cuda-lsh-tests" --gtest_filter='*CudaLshNvrtc*'
