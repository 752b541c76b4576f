#!/usr/bin/env bash
# The main job, for now: build attnc, compile every example spec, show what
# the compiler makes of them (attn IR, resolved tunables, generated kernels),
# check the CUDA kernels with NVRTC, and benchmark attention on this CPU
# (dense, low-rank and LSH, and the Reformer fixed-tokens sweep).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh" "$root/build" >/dev/null
attnc="$root/build/bin/attnc"
out="$root/build/demo"
mkdir -p "$out"

for spec in "$root"/examples/*.attn; do
  echo "=== $(basename "$spec")"
  "$attnc" compile "$spec"
done
echo
echo "=== attnc compile examples/alibi_window.attn --emit=mlir"
"$attnc" compile "$root/examples/alibi_window.attn" --emit=mlir
echo
echo "=== attnc compile examples/linformer_encoder.attn -o $out/linformer (artifact)"
"$attnc" compile "$root/examples/linformer_encoder.attn" -o "$out/linformer" 2>/dev/null
echo
echo "=== attnc compile examples/alibi_window.attn --check-nvrtc --arch sm_90"
"$attnc" compile "$root/examples/alibi_window.attn" --check-nvrtc --arch sm_90 2>/dev/null
echo
echo "=== attnc compile examples/reformer_lm.attn --check-nvrtc --arch sm_90 (LSH kernels)"
"$attnc" compile "$root/examples/reformer_lm.attn" --check-nvrtc --arch sm_90 2>/dev/null
echo
echo "=== attnc bench (CPU): dense fused vs unfused vs low-rank vs LSH, then the LSH sweep"
"$attnc" bench --n 512,1024,2048,4096 --max-backward-n 2048 --lsh-rounds 1,4,8 \
  --csv "$out/bench.csv" --svg "$out/bench.svg" \
  --sweep-csv "$out/lsh-sweep.csv" --sweep-svg "$out/lsh-sweep.svg"
