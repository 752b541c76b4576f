#!/usr/bin/env bash
# The one prepared GPU check (docs/design.md, Testing without a GPU), for the device machine: CUDA,
# cmake, ninja, PyTorch, no MLIR. Needs device-inputs/ from
# scripts/device-prepare.sh carried along. Builds the runtime-only
# configuration, runs the GPU tests of the runtime, then every prepared case
# on the GPU against the CPU reference, and writes everything to $OUT.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/device-out}"
mkdir -p "$out"
exec > >(tee "$out/device-check.log") 2>&1
tee_pid=$!
d="$root/device-inputs"
[ -d "$d/cases" ] || { echo "device-check: run scripts/device-prepare.sh first (and carry device-inputs)"; exit 1; }
nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm --format=csv || true

b="$root/build-device"
# No gtest there either: build the runner alone (its runs below exercise the
# driver, the launches and the >48 KiB shared-memory opt-in).
cmake -G Ninja -S "$root" -B "$b" -DCMAKE_BUILD_TYPE=Release -DATTNC_RUNTIME_ONLY=ON \
  -DATTNC_BUILD_TESTS=OFF -DATTNC_EXTRA_INCLUDE="$d/include" >"$out/cmake.log" 2>&1 ||
  { tail -30 "$out/cmake.log"; exit 1; }
time ninja -C "$b" -j 16 attnc-rt >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
"$b/bin/attnc-rt" info

echo "=== cases: GPU vs CPU reference"
export ATTNC_CACHE_DIR="$b/kernel-cache"
status=0
for c in "$d"/cases/*/; do
  name="$(basename "$c")"
  w=(); [ -f "$c/weights.safetensors" ] && w=(--weights "$c/weights.safetensors")
  if ! "$b/bin/attnc-rt" run "$c/art" --target cuda --inputs "$c/in.safetensors" "${w[@]}" \
      --grad "$c/dout.safetensors" --output "$out/$name.gpu.safetensors"; then
    echo "FAIL $name: attnc-rt exited non-zero"; status=1; continue
  fi
  python3 "$root/scripts/device_compare.py" "$c/cpu.safetensors" "$out/$name.gpu.safetensors" "$name" || status=1
done
echo "=== GPU training: the compiled CUDA step of dup64 (attnc-rt train)"
t="$d/train"
if [ -d "$t/cuda" ]; then
  # The first 10 steps against the CPU's losses (same data, weights, schedule).
  if "$b/bin/attnc-rt" train "$t/cuda" --data synthetic:duplicate --steps 10 --lr 3e-3 --warmup 20 \
      --checkpoint-every 10 --out "$out/gpu-f32"; then
    python3 - "$t/cpu-run/train.csv" "$out/gpu-f32/train.csv" <<'PY' || status=1
import sys
rows = lambda p: [l.split(',') for l in open(p).read().split()[1:]]
cpu, gpu = rows(sys.argv[1]), rows(sys.argv[2])
worst = max(abs(float(a[1]) - float(b[1])) / abs(float(a[1])) for a, b in zip(cpu, gpu))
ok = worst < 1e-3 and len(gpu) == 10
print(f"GPU f32 vs CPU losses over {min(len(cpu), len(gpu))} of 10 steps: worst relative difference {worst:.2e}",
      "ok" if ok else "FAIL (a tiny difference can move a token to another LSH bucket: look there first)")
sys.exit(0 if ok else 1)
PY
  else
    echo "FAIL gpu-f32: attnc-rt train exited non-zero"; status=1
  fi
  # The device AdamW (the default) against the CPU AdamW on downloaded
  # gradients: without clipping both round every operation alone, so the
  # checkpoints must be bit-identical (they are on the emulator).
  for o in device host; do
    flag=(); [ "$o" = host ] && flag=(--host-optimizer)
    "$b/bin/attnc-rt" train "$t/cuda" --data synthetic:duplicate --steps 10 --lr 3e-3 --warmup 20 \
      --clip 0 --checkpoint-every 10 "${flag[@]}" --out "$out/gpu-adamw-$o" >/dev/null 2>&1 ||
      { echo "FAIL adamw-$o: attnc-rt train exited non-zero"; status=1; }
  done
  if cmp -s "$out/gpu-adamw-device/ckpt-10.safetensors" "$out/gpu-adamw-host/ckpt-10.safetensors"; then
    echo "device AdamW vs host AdamW, 10 steps without clipping: bit-identical checkpoints ok"
  else
    echo "FAIL device AdamW vs host AdamW: checkpoints differ"
    python3 "$root/test/train/Inputs/compare_runs.py" "$out/gpu-adamw-device" "$out/gpu-adamw-host" 10 1e-5
    status=1
  fi
  # Whole runs in each precision: accuracy on the duplication task, speed.
  for p in f32 bf16 fp16; do
    echo "--- dup64, 150 steps, GEMMs in $p"
    "$b/bin/attnc-rt" train "$t/cuda" --data synthetic:duplicate --steps 150 --lr 3e-3 --warmup 20 \
      --checkpoint-every 150 --precision "$p" --out "$out/gpu-$p-150" 2>&1 | tail -4 || status=1
  done
else
  echo "FAIL train: no $t/cuda (rerun scripts/device-prepare.sh and carry device-inputs)"
  status=1
fi
echo "=== PyTorch SDPA on the same inputs (where torch is present)"
python3 "$root/scripts/device_compare.py" --torch "$d/cases" 2>&1 | tail -20 || true
# Let tee write the log's last lines before exiting.
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
exit $status
