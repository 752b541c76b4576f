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
