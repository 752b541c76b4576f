#!/usr/bin/env bash
# Installs what attnc needs on a Debian 12 machine, only when it is missing.
# CUDA 13 cannot come from Debian: it is expected at /usr/local/cuda.
set -euo pipefail

packages=(cmake ninja-build g++ python3 libgtest-dev clang-format
          llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
          libcli11-dev nlohmann-json3-dev libopenblas-dev)

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

# The CUDA 12 NVRTC (CUDA 13's dropped Volta, sm_70): PyPI's wheel into
# .deps/nvrtc-cu12 of this tree, where the runtime looks for it
# (runtime/NvrtcLibraries.h). Fetched here, at set-up, never at run time.
root="$(cd "$(dirname "$0")/.." && pwd)"
nvrtc12="$root/.deps/nvrtc-cu12"
if [ ! -f "$nvrtc12/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
  echo "bootstrap: installing the CUDA 12 NVRTC (nvidia-cuda-nvrtc-cu12) into $nvrtc12"
  python3 -m pip --version >/dev/null 2>&1 || {
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  }
  rm -rf "$nvrtc12.tmp"
  # --target keeps it out of every Python environment (so Debian's
  # externally-managed rule does not apply to it).
  python3 -m pip install -q --no-deps --disable-pip-version-check --root-user-action=ignore --target "$nvrtc12.tmp" \
    "nvidia-cuda-nvrtc-cu12==12.9.86" ||
    python3 -m pip install -q --no-deps --disable-pip-version-check --root-user-action=ignore --break-system-packages \
      --target "$nvrtc12.tmp" "nvidia-cuda-nvrtc-cu12==12.9.86"
  rm -rf "$nvrtc12" && mv "$nvrtc12.tmp" "$nvrtc12"
fi
