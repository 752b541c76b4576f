#!/usr/bin/env bash
# Installs what attnc needs on a Debian 12 machine, only when it is missing.
# CUDA 13 cannot come from Debian: it is expected at /usr/local/cuda.
# Usage: scripts/bootstrap.sh [--cublas12]   (--cublas12: cuBLAS 12, for
# GPU training on Volta)
set -euo pipefail

packages=(cmake ninja-build g++ python3 libgtest-dev clang-format
          llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
          libcli11-dev nlohmann-json3-dev libopenblas-dev
          libopenmpi-dev openmpi-bin)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -f /usr/local/cuda/include/nvrtc.h ]; then
  echo "bootstrap: error: the CUDA toolkit (NVRTC headers) was not found at /usr/local/cuda" >&2
  echo "bootstrap: install CUDA 12 or 13, or set CUDAToolkit_ROOT" >&2
  exit 1
fi

# Volta's CUDA 12 libraries come from PyPI's wheels into .deps/ of this
# tree, where the runtime looks for them (runtime/NvrtcLibraries.h,
# runtime/Cublas.h). Fetched here, at set-up, never at run time.
root="$(cd "$(dirname "$0")/.." && pwd)"

# install_wheel DIR PACKAGE==VERSION: pip's --target install, atomically
# (a cut-off install leaves DIR.tmp, never a half DIR).
install_wheel() {
  local dir="$1" spec="$2"
  echo "bootstrap: installing ${spec%%==*} into $dir"
  python3 -m pip --version >/dev/null 2>&1 || {
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  }
  rm -rf "$dir.tmp"
  # --target keeps it out of every Python environment (so Debian's
  # externally-managed rule does not apply to it).
  python3 -m pip install -q --no-deps --disable-pip-version-check --root-user-action=ignore --target "$dir.tmp" "$spec" ||
    python3 -m pip install -q --no-deps --disable-pip-version-check --root-user-action=ignore --break-system-packages \
      --target "$dir.tmp" "$spec"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
}

# The CUDA 12 NVRTC (CUDA 13's dropped Volta, sm_70): always, it is small
# (~90 MB) and the sm_70 tests compile with it.
nvrtc12="$root/.deps/nvrtc-cu12"
[ -f "$nvrtc12/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ] || install_wheel "$nvrtc12" "nvidia-cuda-nvrtc-cu12==12.9.86"

# nvdisasm, for attnc perf (the performance model reads the kernels'
# machine code; docs/perf-model.md): PyPI has only CUDA 13's (about 6 MB),
# which reads sm_75 and newer.
sasstools="$root/.deps/sass-tools"
[ -x "$sasstools/nvidia/cu13/bin/nvdisasm" ] || install_wheel "$sasstools" "nvidia-cuda-nvdisasm==13.5.37"

# cuBLAS 12 (CUDA 13's dropped Volta too): GPU training on a V100 needs it.
# About 1 GB installed and nothing here runs it, so only on request.
for arg in "$@"; do
  if [ "$arg" = --cublas12 ]; then
    cublas12="$root/.deps/cublas-cu12"
    [ -f "$cublas12/nvidia/cublas/lib/libcublas.so.12" ] || install_wheel "$cublas12" "nvidia-cublas-cu12==12.9.1.4"
  fi
done
