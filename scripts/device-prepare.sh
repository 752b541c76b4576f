#!/usr/bin/env bash
# Prepares device-inputs/ for scripts/device-check.sh (run here, where MLIR
# is): CUDA artifacts, their inputs, CPU reference outputs, benchmark and
# training artifacts, and the header-only libraries the GPU machine lacks
# (CLI11, nlohmann-json). Then, with the device tool:
#   run "bash scripts/device-check.sh", carry ["device-inputs"]
# device-inputs/ is git-ignored and must stay under the carry limit (64 MiB):
# the cases' inputs are remade on that machine (scripts/device_inputs.py).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh" "$root/build" >/dev/null
attnc="$root/build/bin/attnc"
d="$root/device-inputs"
rm -rf "$d" && mkdir -p "$d/include" "$d/cases" "$d/bench"
cp -r /usr/include/CLI /usr/include/nlohmann "$d/include/"

# Every kernel family x dtype x head dim, against the CPU (f32) on the same
# inputs. D = 64 cases are compiled for sm_80, so the H200 re-tiles them at
# load (runtime/DeviceTiling.h); the others for sm_90.
declare -A family=(
  [dense]="attention a { mask causal mask padding param t(h) = 0.8 score s * t(h) }"
  [lowrank]="attention a { kv lowrank(k = 48, share = headwise) mask padding }"
  [lsh]="attention a { qk shared bucket lsh(buckets = 16, rounds = 2, chunk = 32, before = 1) mask causal mask padding }"
)
jobs=()
for f in dense lowrank lsh; do
  for dtype in fp32 fp16 bf16; do
    for D in 64 128 256; do
      B=1 H=2 N=$((D == 256 ? 150 : 203))
      name="${f}_${dtype}_d${D}"
      dir="$d/cases/$name"
      mkdir -p "$dir"
      objective=causal_lm
      [[ "${family[$f]}" == *causal* ]] || objective=mlm
      printf '%s\nmodel m { vocab 256 seq %s d_model %s heads %s layers 1 dtype %s objective %s layer { attention a ffn } }\n' \
        "${family[$f]}" "$N" "$((H * D))" "$H" "$dtype" "$objective" >"$dir/spec.attn"
      arch=sm_90; [ "$D" = 64 ] && arch=sm_80
      echo "$arch" >"$dir/arch"
      jobs+=("$name $B $H $N $D $arch")
    done
  done
done
prepare_case() { # name B H N D arch
  local dir="$d/cases/$1"
  "$attnc" compile "$dir/spec.attn" --target cuda --arch "$6" -o "$dir/art" >/dev/null 2>&1
  python3 "$root/scripts/device_inputs.py" "$dir" "$2" "$3" "$4" "$5"
  local w=(); [ -f "$dir/weights.safetensors" ] && w=(--weights "$dir/weights.safetensors")
  "$attnc" run "$dir/spec.attn" --inputs "$dir/in.safetensors" "${w[@]}" \
    --grad "$dir/dout.safetensors" --output "$dir/cpu.safetensors" >/dev/null 2>&1
  # The CUDA artifact holds only what the GPU needs; the inputs are remade
  # there by the same script (standard-library Python), checked against
  # these digests: half the carried bytes.
  rm -f "$dir/art"/model_* "$dir/art/kernels.cpp" "$dir/art/attn.mlir"
  echo "$2 $3 $4 $5" >"$dir/shape"
  (cd "$dir" && sha256sum ./*.safetensors | grep -v cpu.safetensors >inputs.sha256 &&
    rm -f in.safetensors dout.safetensors weights.safetensors)
}
export -f prepare_case; export d attnc root
printf '%s\n' "${jobs[@]}" | xargs -P 2 -L 1 bash -c 'prepare_case $0 $1 $2 $3 $4 $5'

# Benchmarks (attnc-rt bench beside PyTorch): fp16 artifacts for sm_90.
bench() { # name spec seq D
  printf '%s\nmodel m { vocab 256 seq %s d_model %s heads 16 layers 1 dtype fp16 objective %s layer { attention a ffn } }\n' \
    "$2" "$3" "$((16 * $4))" "$([[ "$2" == *causal* ]] && echo causal_lm || echo mlm)" >"$d/bench/$1.attn"
  "$attnc" compile "$d/bench/$1.attn" --target cuda --arch sm_90 -o "$d/bench/$1" >/dev/null 2>&1
  rm -f "$d/bench/$1"/model_* "$d/bench/$1/kernels.cpp" "$d/bench/$1/attn.mlir"
}
bench dense_d64 "attention a { }" 4096 64
bench dense_d128 "attention a { }" 4096 128
bench causal_d128 "attention a { mask causal }" 4096 128
bench lowrank_d64 "attention a { kv lowrank(k = 256, share = headwise) }" 4096 64
bench lsh_d64 "attention a { qk shared bucket lsh(buckets = 64, rounds = 4, chunk = 64, before = 1) }" 4096 64

# PyTorch on the GPU (device-check step 6): f32 artifacts that the
# runtime-only libattnc there loads (attnc_load), checked against float64.
mkdir -p "$d/torch"
torch_artifact() { # name spec objective
  printf '%s\nmodel m { vocab 256 seq 1024 d_model 512 heads 8 layers 1 dtype fp32 objective %s layer { attention a ffn } }\n' \
    "$2" "$3" >"$d/torch/$1.attn"
  "$attnc" compile "$d/torch/$1.attn" --target cuda --arch sm_90 -o "$d/torch/$1" >/dev/null 2>&1
  rm -f "$d/torch/$1"/model_* "$d/torch/$1/kernels.cpp" "$d/torch/$1/attn.mlir"
}
torch_artifact causal_f32_d64 "attention a { mask causal }" causal_lm
torch_artifact alibi_f32_d64 "attention a { param slope(h) = alibi score s + slope(h) * float(kv - q) mask causal }" causal_lm
torch_artifact lowrank_f32_d64 "attention a { kv lowrank(k = 32, share = headwise) }" mlm

# The Linformer table and the Reformer sweep on the GPU (device-check step
# 5): dense, low-rank k = 128 and 256, and LSH kernels for sequences up to
# 16384, fp16, D = 64, 16 heads.
mkdir -p "$d/sweep"
sweep() { # name spec
  printf '%s\nmodel m { vocab 256 seq 16384 d_model 1024 heads 16 layers 1 dtype fp16 objective mlm layer { attention a ffn } }\n' \
    "$2" >"$d/sweep/$1.attn"
  "$attnc" compile "$d/sweep/$1.attn" --target cuda --arch sm_90 -o "$d/sweep/$1" >/dev/null 2>&1
  rm -f "$d/sweep/$1"/model_* "$d/sweep/$1/kernels.cpp" "$d/sweep/$1/attn.mlir"
}
sweep dense "attention a { }"
sweep lowrank_k128 "attention a { kv lowrank(k = 128, share = headwise) }"
sweep lowrank_k256 "attention a { kv lowrank(k = 256, share = headwise) }"
sweep lsh "attention a { qk shared bucket lsh(buckets = 64, rounds = 4, chunk = 64, before = 1) }"

# GPU training: README's duplication model (batch 8, its train block) and
# dup64 (batch 16) with, as the reference, the CPU artifact's losses over
# the same first steps.
t="$d/train"
mkdir -p "$t"
"$attnc" compile "$root/examples/reformer_duplicate.attn" --target cuda --arch sm_90 --plan-batch 8 -o "$t/dup" >/dev/null
"$attnc" compile "$root/test/train/Inputs/dup64.attn" --target cuda --arch sm_90 --plan-batch 16 -o "$t/cuda" >/dev/null
"$attnc" compile "$root/test/train/Inputs/dup64.attn" --target cpu --plan-batch 16 -o "$t/cpu" >/dev/null
# Attention on the step's buffers (dense, shared-QK, low-rank, fp16, bf16):
# against the host path on the same GPU (test/train/device-attention.test).
"$attnc" compile "$root/test/train/Inputs/device-attention.attn" --target cuda --arch sm_90 --plan-batch 2 -o "$t/devattn" >/dev/null
# The Volta kernels on the lent GPU (device-check step 1b) are compute_70
# PTX, which only a CUDA 12 NVRTC makes: that machine has none, so the
# project's (scripts/bootstrap.sh) goes along packed (about 31 MB).
nv="$root/.deps/nvrtc-cu12"
tar -C "$nv" -cf - nvidia/cuda_nvrtc/lib/libnvrtc.so.12 $(cd "$nv" && ls nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.*) |
  xz -T2 -6 >"$d/nvrtc12.tar.xz"
cat "$root"/docs/*.md >"$t/corpus.txt" # the MLM models' text (that machine may lack any)
"$root/build/bin/attnc-rt" train "$t/cpu" --data synthetic:duplicate --steps 10 --lr 3e-3 --warmup 20 \
  --checkpoint-every 10 --out "$t/cpu-run" 2>/dev/null | tail -1
size=$(du -sm "$d" | cut -f1)
echo "device-inputs: $size MiB (the carry limit is 64 MiB)"
[ "$size" -lt 64 ] || { echo "device-prepare: device-inputs is over the carry limit" >&2; exit 1; }
