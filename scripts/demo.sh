#!/usr/bin/env bash
# The main job: build attnc, then train small models on this CPU (or on the
# GPU when there is one) with kernels attnc generates from their specs, each
# with the training recipe its spec's train block carries, and report:
#   1. a Reformer (LSH attention, reversible layer) on the duplication task
#      (examples/reformer_duplicate.attn): accuracy on the second half;
#   2. the Linformer paper's claim, measured: a Linformer masked LM
#      (examples/linformer_tiny.attn) and its dense twin
#      (examples/dense_tiny.attn) trained for the same steps on the license
#      texts every Debian machine has; held-out bits per byte of both, their
#      ratio (the `fidelity:` line) and both held-out curves in one plot;
#   3. the compiler: every example compiled, the LSH kernels checked with
#      NVRTC, and the compiled step's memory plan by depth.
# Set DEMO_SKIP_SWEEP=1 to skip the k sweep (two more Linformer runs, ~5 min).
# `attnc bench` (not run here, ~2 min) times the kernels.
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
"$attnc" train "$root/examples/reformer_duplicate.attn" --data synthetic:duplicate --no-resume \
  --out "$out/reformer_duplicate" "${target[@]}"
echo
# Two trainings side by side, one core each (this machine has two), with
# their reports printed when both are done; exits if either failed.
train_pair() { # NAME1 SPEC1 NAME2 SPEC2
  local pids=() name spec
  while (($#)); do
    name=$1 spec=$2
    shift 2
    OMP_NUM_THREADS=1 "$attnc" train "$spec" --data /usr/share/common-licenses --no-resume \
      --out "$out/$name" "${target[@]}" > "$out/$name.log" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  return $failed
}
report() { # NAME: the run's report lines
  grep -E "^(trained|final|best)" "$out/$1.log" | sed "s/^/  /"
}
echo "=== 2. Linformer (k = 32) against its dense twin: masked LMs on /usr/share/common-licenses,"
echo "    each with its spec's recipe (2,000 steps), side by side"
if ! train_pair linformer_tiny "$root/examples/linformer_tiny.attn" dense_tiny "$root/examples/dense_tiny.attn"; then
  tail -n 5 "$out/linformer_tiny.log" "$out/dense_tiny.log" >&2
  exit 1
fi
for name in linformer_tiny dense_tiny; do echo "$name:"; report $name; done
# The last evaluation of each run (eval.csv: step,loss,bits_per_byte,accuracy).
bpb() { tail -n 1 "$out/$1/eval.csv" | cut -d, -f3; }
python3 -c "import sys; l, d = float(sys.argv[1]), float(sys.argv[2]); print(f'fidelity: linformer {l:.3f} bits/byte, dense {d:.3f} bits/byte, ratio {l / d:.3f}')" \
  "$(bpb linformer_tiny)" "$(bpb dense_tiny)"
"$attnc" plot "$out/linformer_tiny" "$out/dense_tiny" --labels "Linformer k = 32,dense" \
  --title "Held-out loss: Linformer vs dense, masked LM on license texts" \
  -o "$out/fidelity.svg" | tail -n 1
if [[ -z "${DEMO_SKIP_SWEEP:-}" ]]; then
  echo
  echo "=== 2b. The k sweep: k = 8 and 16 with the same recipe, beside k = 32 and dense"
  for k in 8 16; do
    sed "s/k = 32, share/k = $k, share/" "$root/examples/linformer_tiny.attn" > "$out/linformer_k$k.attn"
  done
  if ! train_pair sweep_k8 "$out/linformer_k8.attn" sweep_k16 "$out/linformer_k16.attn"; then
    tail -n 5 "$out/sweep_k8.log" "$out/sweep_k16.log" >&2
    exit 1
  fi
  for k in 8 16; do echo "k = $k: $(bpb sweep_k$k) bits/byte"; done
  echo "k = 32: $(bpb linformer_tiny) bits/byte"
  echo "dense: $(bpb dense_tiny) bits/byte"
  "$attnc" plot "$out/sweep_k8" "$out/sweep_k16" "$out/linformer_tiny" "$out/dense_tiny" \
    --labels "k = 8,k = 16,k = 32,dense (k = 64)" \
    --title "Held-out loss by Linformer k (seq 64, 2,000 steps)" -o "$out/k-sweep.svg" | tail -n 1
fi
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
    grep -A1 "^compiled training step of $spec (batch 1.*what attnc train runs" || true
done
echo
echo "Plots: $out/fidelity.svg, $out/k-sweep.svg; each run's loss.svg in $out/<model>/"
echo "Training logs: train.csv and eval.csv in the same directories; checkpoints: latest.json there."
