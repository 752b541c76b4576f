#!/usr/bin/env bash
# The whole test suite: builds (installing what is missing), runs gtest and
# lit through ctest, checks that the runtime still builds without MLIR, and
# runs the Python package's tests in a cached venv.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"

"$root/scripts/build.sh" "$build"

# The sources follow .clang-format (scripts/format.sh --fix rewrites them).
"$root/scripts/format.sh"

# The runtime-only configuration (what the GPU machine builds): no MLIR.
rt="$root/build-runtime-only"
if [ ! -f "$rt/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$rt" -DCMAKE_BUILD_TYPE=Release -DATTNC_RUNTIME_ONLY=ON >/dev/null
fi
# Only what the GPU machine runs (attnc-rt, libattnc.so) and one test
# binary: the full suites run below, in the main build.
ninja -C "$rt" -j "${ATTNC_JOBS:-2}" attnc-rt attnc_capi attnc-runtime-tests
(cd "$rt" && ctest --output-on-failure -j2 -R "Safetensors|Manifest")
# The GPU device check rehearsed on the SIMT emulator, its files against the device tool's limits.
"$root/scripts/device-rehearsal.sh"

(cd "$build" && ctest --output-on-failure -j2)

# Every command README.md shows, as written (long ones up to a cap).
"$root/scripts/readme-commands.sh"

# The Python package (bindings/python, docs/pytorch.md): a venv cached in
# the build tree holds numpy, pytest and torch from PyPI (about 3 GB with
# torch's CUDA libraries; installed once), `pip install .` reuses build/,
# then pytest runs test/python (test_torch.py against SDPA in float64 and,
# as peers, lucidrains' linformer and reformer_pytorch packages).
venv="$build/python-venv"
if ! "$venv/bin/python" -c "import numpy, pytest, torch, linformer, reformer_pytorch" 2>/dev/null; then
  echo "test: installing numpy, pytest, torch, linformer and reformer_pytorch into $venv (once)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check numpy pytest torch linformer \
    reformer_pytorch
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "$root"
(cd "$build" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/test/python")
