#!/usr/bin/env bash
# Prepares device-inputs/ for scripts/device-check.sh (run here, where MLIR
# is): CUDA artifacts for sm_90, their inputs, CPU reference outputs, and the
# header-only libraries the GPU machine lacks (CLI11, nlohmann-json).
# Then, with the device tool:  run "bash scripts/device-check.sh", carry
# ["device-inputs"]. device-inputs/ is git-ignored.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh" "$root/build" >/dev/null
attnc="$root/build/bin/attnc"
d="$root/device-inputs"
rm -rf "$d" && mkdir -p "$d/include" "$d/cases"
cp -r /usr/include/CLI /usr/include/nlohmann "$d/include/"

# name | spec | dtype of the model | B H N D (all of device-inputs/ must
# stay under the device tool's 64 MiB carry limit: check `du -sh`)
cases=(
  "dense_f16_d64|attention a { mask causal }|fp16|2 4 600 64"
  "mod_bf16_d128|attention a { mask padding param t(h) = 0.8 score s * t(h) mask q - kv < 300 }|bf16|2 2 777 128"
  "dense_f32_d64|attention a { mask causal mask padding }|fp32|1 4 513 64"
  "lowrank_f16_d64|attention a { kv lowrank(k = 128, share = headwise) mask padding }|fp16|1 4 768 64"
  "lsh_f16_d64|attention a { qk shared bucket lsh(buckets = 32, rounds = 4, chunk = 64) mask causal }|fp16|1 4 1000 64"
  "lsh_f32_d128|attention a { qk shared bucket lsh(buckets = 16, rounds = 2, chunk = 32, before = 1, after = 1) mask padding }|fp32|1 2 333 128"
  # Causal fp16 at head dim 256 (spilled before the forward's mask rewrite).
  "causal_f16_d256|attention a { mask causal }|fp16|1 1 400 256"
  # A narrow window: attn-key-band's block skipping in all three kernels.
  "window_f16_d64|attention a { mask causal mask q - kv < 128 }|fp16|1 2 1024 64"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name spec dtype shape <<<"$c"
  read -r B H N D <<<"$shape"
  dir="$d/cases/$name"
  mkdir -p "$dir"
  objective=causal_lm
  [[ "$spec" == *causal* ]] || objective=mlm
  printf '%s\nmodel m { vocab 256 seq %s d_model %s heads %s layers 1 dtype %s objective %s layer { attention a ffn } }\n' \
    "$spec" "$N" "$((H * D))" "$H" "$dtype" "$objective" > "$dir/spec.attn"
  "$attnc" compile "$dir/spec.attn" --target cuda --arch sm_90 -o "$dir/art" 2>/dev/null
  python3 "$root/scripts/device_inputs.py" "$dir" "$B" "$H" "$N" "$D"
  # The CPU reference (f32) on the same inputs.
  w=(); [ -f "$dir/weights.safetensors" ] && w=(--weights "$dir/weights.safetensors")
  "$attnc" run "$dir/spec.attn" --inputs "$dir/in.safetensors" "${w[@]}" \
    --grad "$dir/dout.safetensors" --output "$dir/cpu.safetensors" 2>&1 | tail -1
done

# GPU training: dup64's compiled CUDA step (batch 16) and, as the reference,
# the CPU artifact's losses over the same first steps.
t="$d/train"
mkdir -p "$t"
"$attnc" compile "$root/test/train/Inputs/dup64.attn" --target cuda --arch sm_90 --plan-batch 16 -o "$t/cuda" >/dev/null
"$attnc" compile "$root/test/train/Inputs/dup64.attn" --target cpu --plan-batch 16 -o "$t/cpu" >/dev/null
"$root/build/bin/attnc-rt" train "$t/cpu" --data synthetic:duplicate --steps 10 --lr 3e-3 --warmup 20 \
  --checkpoint-every 10 --out "$t/cpu-run" 2>/dev/null | tail -1
du -sh "$d"
