#!/usr/bin/env bash
# Installs the build into a fresh prefix and trains 3 steps with the
# installed attnc while the source and build trees are hidden (a private
# mount namespace with empty file systems over both): the installed binaries
# must find their kernel headers beside themselves, never in either tree.
# Usage: install-and-train.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$(cd "$1" && pwd)" build="$(cd "$2" && pwd)"
tmp="$(mktemp -d /tmp/attnc-install.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
echo "installed: $(cd "$tmp/prefix" && ls bin | tr '\n' ' ')"
echo "kernel headers: $(cd "$tmp/prefix/share/attnc/kernels" && ls | tr '\n' ' ')"
cp "$src/examples/reformer_duplicate.attn" "$tmp/spec.attn"

# A wrong override is an error naming it, not a crash.
if ATTNC_KERNEL_INCLUDE=/nonexistent ATTNC_CACHE_DIR="$tmp/cache" \
    "$tmp/prefix/bin/attnc" train "$tmp/spec.attn" --data synthetic:duplicate --steps 1 \
    --batch 2 --out "$tmp/bad" 2>"$tmp/bad.err" >/dev/null; then
  echo "a wrong ATTNC_KERNEL_INCLUDE trained anyway" >&2
  exit 1
fi
echo "bad override: $(grep -m1 'ATTNC_KERNEL_INCLUDE' "$tmp/bad.err")"

unshare -m bash -c '
  set -euo pipefail
  src="$1" build="$2" tmp="$3"
  mount -t tmpfs -o ro,size=1m attnc-hidden "$src"
  case "$build" in
    "$src"/*) ;; # hidden with the source tree
    *) mount -t tmpfs -o ro,size=1m attnc-hidden "$build" ;;
  esac
  test ! -e "$src/CMakeLists.txt" && test ! -e "$build/CMakeCache.txt"
  echo "source and build trees hidden"
  cd "$tmp"
  env -u ATTNC_KERNEL_INCLUDE ATTNC_CACHE_DIR="$tmp/cache" ATTNC_TUNING_DB="$tmp/tuning.json" \
    PATH=/usr/bin:/bin "$tmp/prefix/bin/attnc" train spec.attn --data synthetic:duplicate \
    --steps 3 --batch 2 --checkpoint-every 3 --out run 2>"$tmp/train.err"
  "$tmp/prefix/bin/attnc-opt" --help | grep -o "attn-kernel-pipeline" | head -1
' _ "$src" "$build" "$tmp" || { cat "$tmp/train.err" >&2; exit 1; }
echo "checkpoint: $(cd "$tmp/run" && ls latest.json)"
