#!/usr/bin/env bash
# The main job: build attnc, then train two tiny models on this CPU (or on
# the GPU when there is one) with kernels attnc generates from their specs,
# and report:
#   1. a Reformer (LSH attention, reversible layer) on the duplication task
#      (examples/reformer_duplicate.attn): accuracy on the second half;
#   2. a Linformer masked LM (examples/linformer_tiny.attn) on the license
#      texts every Debian machine has: held-out bits per byte.
# Both train with the step the whole-model passes compile (expanded graph,
# derived backward, fused row kernels, one planned arena). Then the
# compiler side: every example compiled, the LSH kernels checked with
# NVRTC, and the compiled step's memory plan by depth. `attnc bench` (not
# run here, ~2 min) times the kernels.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh" "$root/build" >/dev/null
attnc="$root/build/bin/attnc"
out="$root/build/demo"
mkdir -p "$out"
# With an NVIDIA GPU the models train there (the compiled CUDA step).
target=()
if gpu="$("$root/build/bin/attnc-rt" info 2>/dev/null | grep '^GPU: ')" && [[ "$gpu" != "GPU: none"* ]]; then
  target=(--target cuda)
  echo "training on ${gpu#GPU: }"
fi

echo "=== 1. Reformer (LSH, 4 hash rounds, reversible) on the duplication task"
"$attnc" train "$root/examples/reformer_duplicate.attn" --data synthetic:duplicate \
  --steps 300 --batch 8 --lr 2e-3 --warmup 30 --eval-every 100 --no-resume \
  --out "$out/reformer_duplicate" "${target[@]}"
echo
echo "=== 2. Linformer (k = 64) masked LM on /usr/share/common-licenses"
"$attnc" train "$root/examples/linformer_tiny.attn" --data /usr/share/common-licenses \
  --steps 400 --batch 8 --lr 2e-3 --warmup 40 --eval-every 100 --no-resume \
  --out "$out/linformer_tiny" "${target[@]}"
echo
echo "=== 3. The compiler: every example spec, and the Reformer's CUDA kernels (attention and"
echo "    the whole training step's) through NVRTC"
for spec in "$root"/examples/*.attn; do
  "$attnc" compile "$spec" 2>/dev/null
done
"$attnc" compile "$root/examples/reformer_lm.attn" --check-nvrtc --arch sm_90 2>/dev/null |
  grep -E "NVRTC|lsh_(hash|fwd|combine)_lsh0|CUDA training step|attnc_step_cross_entropy:"
echo
echo "=== 4. Whole-model compilation: activation memory of the planned training step by depth"
echo "    (reversible layers: flat; standard layers, each recomputed from its input: grows slowly)"
for spec in reformer_lm dense_encoder; do
  "$attnc" compile "$root/examples/$spec.attn" --memory-plan 2>/dev/null |
    grep -A1 "^compiled training step of $spec (batch 1\(, each\|)\)" || true
done
echo
echo "Loss curves: $out/reformer_duplicate/loss.svg, $out/linformer_tiny/loss.svg"
echo "Training logs: train.csv in the same directories; checkpoints: latest.json there."
