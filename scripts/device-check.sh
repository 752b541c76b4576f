#!/usr/bin/env bash
# The one prepared GPU check (docs/design.md, Testing without a GPU), for the
# device machine: CUDA, cmake, ninja, PyTorch, no MLIR. Needs device-inputs/
# from scripts/device-prepare.sh carried along. Builds the runtime-only
# configuration, then, within about 6 minutes:
#   0b. NCCL's collectives with one rank (attnc-rt info --collectives);
#   1. every kernel family x dtype x head dim on the GPU against the CPU;
#   2. compute-sanitizer memcheck and racecheck on one small case per family;
#   3. GPU training: README's duplication model to >= 99 % held-out accuracy,
#      dup64 against the CPU's losses and the host AdamW, and attention on
#      the step's buffers (dense, shared-QK, low-rank, fp16, bf16) against
#      the host path, and the device step's data-parallel exchange by NCCL
#      against device copies (one rank, 2 micro-batches);
#   4. benchmarks (attnc-rt bench) beside PyTorch SDPA and FlexAttention;
#   5. the Linformer table (dense vs low-rank k = 128, 256 as N grows) and
#      the Reformer sweep (dense vs LSH per token, B·N fixed);
#   6. attnc from PyTorch: the runtime-only libattnc loading artifacts,
#      the op on CUDA tensors against float64 (causal, a learned slope,
#      low-rank), on a side stream with no synchronisation, under
#      torch.compile; then timed beside SDPA and FlexAttention.
# Writes everything to $OUT, and $OUT/summary.md. Without a GPU it stops
# after building, says "no GPU" in the summary and exits 3; with
# DEVICE_CHECK_SIMULATE=1 it then rehearses steps 1, 4, 5 and two cases
# of step 3's last part on the SIMT emulator instead (--target cuda-sim, the
# D = 64 cases, a small shape) to check their plumbing, and exits 3 still.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/device-out}"
mkdir -p "$out"
exec > >(tee "$out/device-check.log") 2>&1
tee_pid=$!
summary="$out/summary.md"
finish() { # exit code
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null
  exit "$1"
}
start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start)) s"; }
d="$root/device-inputs"
[ -d "$d/cases" ] || { echo "device-check: run scripts/device-prepare.sh first (and carry device-inputs)"; finish 1; }
jobs=$(nproc 2>/dev/null || echo 4)

b="$root/build-device"
# No gtest there either: build the runner alone (its runs below exercise the
# driver, the launches and the >48 KiB shared-memory opt-in).
cmake -G Ninja -S "$root" -B "$b" -DCMAKE_BUILD_TYPE=Release -DATTNC_RUNTIME_ONLY=ON \
  -DATTNC_BUILD_TESTS=OFF -DATTNC_EXTRA_INCLUDE="$d/include" >"$out/cmake.log" 2>&1 ||
  { tail -30 "$out/cmake.log"; echo "# device check: cmake failed" >"$summary"; finish 1; }
ninja -C "$b" -j "$jobs" attnc-rt >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; echo "# device check: the build failed" >"$summary"; finish 1; }
rt="$b/bin/attnc-rt"
"$rt" info | tee "$out/info.txt"
tgt=cuda cases="$d"/cases/*/ simulate=0
if ! grep -q "^GPU: .*(sm_[0-9]" "$out/info.txt"; then
  { echo "# device check: no GPU"
    echo
    echo "attnc-rt built in $(elapsed); \`attnc-rt info\` found no usable GPU:"
    echo; echo '```'; cat "$out/info.txt"; echo '```'; } >"$summary"
  echo "device-check: no GPU (built in $(elapsed)); see $summary"
  [ "${DEVICE_CHECK_SIMULATE:-0}" = 1 ] || finish 3
  echo "device-check: DEVICE_CHECK_SIMULATE=1: rehearsing steps 1 and 4 on the SIMT emulator"
  tgt=cuda-sim cases="$d"/cases/*_d64/ simulate=1
  echo >>"$summary"; echo "Rehearsal on the SIMT emulator (no GPU figures):" >>"$summary"; echo >>"$summary"
fi
[ $simulate = 1 ] || nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm --format=csv || true
export ATTNC_CACHE_DIR="$b/kernel-cache"
status=0
[ $simulate = 1 ] ||
  { echo "# device check"; echo; echo '```'; cat "$out/info.txt"; echo '```'; echo; } >"$summary"

echo "=== 0. the cases' inputs, remade as device-prepare.sh made them ($(elapsed))"
remake_inputs() { # case directory
  if ! python3 "$root/scripts/device_inputs.py" "$1" $(cat "$1/shape"); then
    echo "FAIL $(basename "$1"): scripts/device_inputs.py failed"
  elif ! (cd "$1" && sha256sum --quiet -c inputs.sha256); then
    echo "FAIL $(basename "$1"): its remade inputs differ from device-prepare.sh's (inputs.sha256)"
  fi
}
export -f remake_inputs; export root
ls -d $cases | xargs -P "$jobs" -I{} bash -c 'remake_inputs {}' | tee "$out/inputs.txt"
grep -q "^FAIL" "$out/inputs.txt" && status=1

echo "=== 0b. NCCL with one rank: the GPU ranks' collectives ($(elapsed))"
# The data-parallel GPU exchange's engine (runtime/dist/Nccl.h): loaded at
# run time, a communicator bootstrapped through the world, collectives on
# device buffers checked against host values.
if [ $simulate = 0 ]; then
  if "$rt" info --collectives >"$out/collectives.txt" 2>&1; then
    grep "^collectives:" "$out/collectives.txt"
    { echo "## 0b. NCCL, one rank"; echo; grep "^collectives:\|^NCCL:" "$out/collectives.txt"; echo; } >>"$summary"
  else
    tail -3 "$out/collectives.txt"
    { echo "## 0b. NCCL, one rank: FAILED or not available"; echo; echo '```'
      grep "^NCCL:\|collectives" "$out/collectives.txt"; echo '```'; echo; } >>"$summary"
    grep -q "^NCCL: none" "$out/collectives.txt" || status=1
  fi
fi

echo "=== 1. kernel families x dtypes x head dims: GPU vs CPU ($(elapsed))"
run_case() { # case directory [older arch whose kernels to run, e.g. sm_70]
  local c="$1" name; name="$(basename "$c")"
  local w=(); [ -f "$c/weights.safetensors" ] && w=(--weights "$c/weights.safetensors")
  local as=(); [ -n "${2:-}" ] && as=(--as-arch "$2") && name="$name@$2"
  if ! "$rt" run "$c/art" --target "$tgt" "${as[@]}" --inputs "$c/in.safetensors" "${w[@]}" \
      --grad "$c/dout.safetensors" --output "$out/cases/$name.gpu.safetensors" >"$out/cases/$name.log" 2>&1; then
    echo "FAIL $name: attnc-rt exited non-zero: $(tail -1 "$out/cases/$name.log")"; return 1
  fi
  python3 "$root/scripts/device_compare.py" "$c/cpu.safetensors" "$out/cases/$name.gpu.safetensors" "$name"
}
export -f run_case; export rt out root tgt
mkdir -p "$out/cases"
ls -d $cases | xargs -P 8 -I{} bash -c 'run_case {}' >"$out/cases.txt" 2>&1 || status=1
sort "$out/cases.txt"
grep -h "re-tiled" "$out"/cases/*.log | sort -u | head -20
ncase=$(ls -d $cases | wc -l); nfail=$(grep -c "^FAIL" "$out/cases.txt")
{ echo "## 1. Kernels vs the CPU: $((ncase - $(grep -h '^FAIL' "$out/cases.txt" | awk '{print $2}' | sort -u | wc -l))) of $ncase cases pass"
  echo; echo '```'; grep -h "^FAIL" "$out/cases.txt" | head -40; grep -h "re-tiled" "$out"/cases/*.log | sort -u | head -10; echo '```'; echo; } >>"$summary"

echo "=== 1b. the Volta (sm_70) kernels as compute_70 PTX, JIT-compiled by the driver: GPU vs CPU ($(elapsed))"
# Volta's code path (m8n8k4 MMAs, no ldmatrix, synchronous copies, its
# tiles) on this newer GPU. Its PTX needs a CUDA 12 NVRTC, carried packed.
if [ -f "$d/nvrtc12.tar.xz" ]; then
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$d/nvrtc12.tar.xz" "$b/nvrtc12"
  export ATTNC_NVRTC12="$b/nvrtc12"
fi
ls -d $cases | grep -E '_(fp16|bf16|fp32)_d(64|128)/$' |
  xargs -P 8 -I{} bash -c 'run_case {} sm_70' >"$out/volta.txt" 2>&1 || status=1
sort "$out/volta.txt"
nvolta=$(ls -d $cases | grep -cE '_d(64|128)/$')
{ echo "## 1b. Volta kernels (compute_70 PTX JIT-compiled here) vs the CPU: $((nvolta - $(grep -h '^FAIL' "$out/volta.txt" | awk '{print $2}' | sort -u | wc -l))) of $nvolta cases pass"
  echo; echo '```'; grep -h "^FAIL" "$out/volta.txt" | head -40; grep -h "re-tiled" "$out"/cases/*@sm_70.log | sort -u | head -6; echo '```'; echo; } >>"$summary"

if [ $simulate = 0 ]; then
echo "=== 2. compute-sanitizer ($(elapsed))"
san="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
echo "## 2. compute-sanitizer" >>"$summary"; echo >>"$summary"
if [ -n "$san" ]; then
  # The six runs at once (each under a minute's timeout), then their verdicts.
  sanitize() { # family tool
    local c="$d/cases/${1}_fp16_d64" w=()
    [ -f "$c/weights.safetensors" ] && w=(--weights "$c/weights.safetensors")
    timeout 60 "$san" --tool "$2" --error-exitcode 9 "$rt" run "$c/art" --target cuda \
      --inputs "$c/in.safetensors" "${w[@]}" --grad "$c/dout.safetensors" \
      --output "$out/san-$1-$2.safetensors" >"$out/san-$1-$2.log" 2>&1
    echo $? >"$out/san-$1-$2.rc"
  }
  for f in dense lowrank lsh; do for tool in memcheck racecheck; do sanitize $f $tool & done; done
  wait
  for f in dense lowrank lsh; do
    for tool in memcheck racecheck; do
      if [ "$(cat "$out/san-$f-$tool.rc")" = 0 ]; then
        line="ok   $tool ${f}_fp16_d64: $(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$out/san-$f-$tool.log" | tail -1)"
      else
        line="FAIL $tool ${f}_fp16_d64 (exit $(cat "$out/san-$f-$tool.rc"); 124: timed out): $(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|Error" "$out/san-$f-$tool.log" | head -2 | tr '\n' ' ')"
        status=1
      fi
      echo "$line"; echo "- $line" >>"$summary"
    done
  done
else
  echo "no compute-sanitizer on this machine"; echo "- no compute-sanitizer on this machine" >>"$summary"
fi
echo >>"$summary"

echo "=== 3. GPU training ($(elapsed))"
t="$d/train"
echo "## 3. GPU training" >>"$summary"; echo >>"$summary"
# README's duplication model with its own train block (300 steps, batch 8).
if timeout 240 "$rt" train "$t/dup" --data synthetic:duplicate --out "$out/gpu-dup" >"$out/gpu-dup.log" 2>&1; then
  acc=$(grep -o "accuracy [0-9.e-]*" "$out/gpu-dup.log" | tail -1 | awk '{print $2}')
  verdict=$(python3 -c "print('ok  ' if float('$acc') >= 0.99 else 'FAIL')")
  [ "$verdict" = "ok  " ] || status=1
  line="$verdict reformer_duplicate on the GPU: held-out accuracy $acc (needs >= 0.99); $(grep -h "tokens/s" "$out/gpu-dup.log" | tail -1)"
else
  line="FAIL reformer_duplicate: attnc-rt train exited non-zero: $(tail -2 "$out/gpu-dup.log" | tr '\n' ' ')"; status=1
fi
echo "$line"; echo "- $line" >>"$summary"
# dup64: the first 10 steps against the CPU's losses (same data, weights, schedule).
if "$rt" train "$t/cuda" --data synthetic:duplicate --steps 10 --lr 3e-3 --warmup 20 \
    --checkpoint-every 10 --out "$out/gpu-f32" >"$out/gpu-f32.log" 2>&1; then
  line=$(python3 - "$t/cpu-run/train.csv" "$out/gpu-f32/train.csv" <<'PY'
import sys
rows = lambda p: [l.split(',') for l in open(p).read().split()[1:]]
cpu, gpu = rows(sys.argv[1]), rows(sys.argv[2])
worst = max(abs(float(a[1]) - float(b[1])) / abs(float(a[1])) for a, b in zip(cpu, gpu))
ok = worst < 1e-3 and len(gpu) == 10
print(("ok  " if ok else "FAIL") + f" dup64 GPU f32 vs CPU losses over {min(len(cpu), len(gpu))} of 10 steps: worst relative difference {worst:.2e}")
PY
)
else
  line="FAIL dup64 gpu-f32: attnc-rt train exited non-zero"
fi
[[ "$line" == ok* ]] || status=1
echo "$line"; echo "- $line" >>"$summary"
# The device AdamW (the default) against the host AdamW on downloaded
# gradients: without clipping both round every operation alone, so the
# checkpoints must be bit-identical (they are on the emulator).
for o in device host; do
  flag=(); [ "$o" = host ] && flag=(--host-optimizer)
  "$rt" train "$t/cuda" --data synthetic:duplicate --steps 10 --lr 3e-3 --warmup 20 \
    --clip 0 --checkpoint-every 10 "${flag[@]}" --out "$out/gpu-adamw-$o" >/dev/null 2>&1 ||
    { echo "FAIL adamw-$o: attnc-rt train exited non-zero"; status=1; }
done
if cmp -s "$out/gpu-adamw-device/ckpt-10.safetensors" "$out/gpu-adamw-host/ckpt-10.safetensors"; then
  line="ok   device AdamW vs host AdamW, 10 steps without clipping: bit-identical checkpoints"
else
  line="FAIL device AdamW vs host AdamW: checkpoints differ"; status=1
fi
echo "$line"; echo "- $line" >>"$summary"
fi # simulate

# Attention on the step's buffers (device projections and 16-bit copies)
# against the host path on the same GPU, 3 steps each: f32 within 1e-4,
# fp16 within 1e-2 (as on the emulator), bf16 losses within 2e-3. The
# rehearsal runs two of them on the emulator.
t="$d/train"
attn_cases="lsh_fallback:dup:1e-4 lowrank_head:text:1e-4 dense16:dup:1e-2 lowrank_bf16:text:losses"
engine=()
[ $simulate = 1 ] && attn_cases="lowrank_head:text:1e-4 lowrank_bf16:text:losses" engine=(--engine cuda-sim)
echo "### Attention on the step's buffers vs the host path" >>"$summary"; echo >>"$summary"
for case in $attn_cases; do
  IFS=: read -r m kind tol <<<"$case"
  data=synthetic:duplicate; [ "$kind" = text ] && data="$t/corpus.txt"
  ok=1
  for path in dev host; do
    flag=(); [ "$path" = host ] && flag=(--host-attention)
    rm -rf "$out/devattn-$m-$path" # a run there would be resumed
    timeout 120 "$rt" train "$t/devattn" --model "$m" --data "$data" --steps 3 --checkpoint-every 3 \
      "${engine[@]}" "${flag[@]}" --out "$out/devattn-$m-$path" >"$out/devattn-$m-$path.log" 2>&1 || ok=0
  done
  if [ $ok = 0 ]; then
    line="FAIL attention on the step's buffers, $m: attnc-rt train exited non-zero ($out/devattn-$m-*.log)"
  elif [ "$tol" = losses ]; then
    line=$(python3 - "$out/devattn-$m-dev/train.csv" "$out/devattn-$m-host/train.csv" "$m" <<'PY'
import sys
f = lambda p: [float(l.split(',')[1]) for l in open(p).read().split()[1:]]
a, b = f(sys.argv[1]), f(sys.argv[2])
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(("ok  " if worst < 2e-3 and len(a) == 3 else "FAIL") +
      f" attention on the step's buffers, {sys.argv[3]}: losses within {worst:.1e} of the host path's")
PY
)
  else
    r=$(python3 "$root/test/train/Inputs/compare_runs.py" "$out/devattn-$m-dev" "$out/devattn-$m-host" 3 "$tol" 2>&1)
    verdict="FAIL"; [[ "$r" == losses\ within* ]] && verdict="ok  "
    line="$verdict attention on the step's buffers, $m vs the host path: $r; $(grep -h "copies in the last step" "$out/devattn-$m-dev.log" | head -1)"
  fi
  [[ "$line" == ok* ]] || status=1
  echo "$line"; echo "- $line" >>"$summary"
done
# Data parallelism of the device step with one rank (docs/distributed.md):
# 2 micro-batches per step, their gradients exchanged by device copies and
# by NCCL (forced; the rehearsal: MPI through host memory), summed in
# micro-batch order on the device: the same bits either way.
m=lowrank_head
exchange=nccl; [ $simulate = 1 ] && exchange=host
ok=1
for path in local $exchange; do
  rm -rf "$out/dp-$path"
  ATTNC_DEVICE_EXCHANGE=$path timeout 120 "$rt" train "$t/devattn" --model "$m" --data "$t/corpus.txt" \
    --steps 3 --checkpoint-every 3 --micro-batches 2 "${engine[@]}" --out "$out/dp-$path" \
    >"$out/dp-$path.log" 2>&1 || ok=0
done
if [ $ok = 0 ]; then
  line="FAIL data parallel on the device ($m, 2 micro-batches): attnc-rt train exited non-zero ($out/dp-*.log)"
elif cmp -s "$out/dp-local/ckpt-3.safetensors" "$out/dp-$exchange/ckpt-3.safetensors"; then
  line="ok   data parallel on the device ($m, 2 micro-batches, 3 steps): $exchange and device copies give bit-identical checkpoints; $(grep -h "^data parallel on the device: " "$out/dp-$exchange.log" | head -1 | sed 's/^data parallel on the device: //')"
else
  line="FAIL data parallel on the device ($m): the $exchange exchange's checkpoint differs from the device copies'"
fi
[[ "$line" == ok* ]] || status=1
echo "$line"; echo "- $line" >>"$summary"
echo >>"$summary"

echo "=== 4. benchmarks beside PyTorch ($(elapsed))"
mkdir -p "$out/bench"
for a in "$d"/bench/*/; do
  name="$(basename "$a")"
  shapes=(--shape 4,16,1024 --shape 2,16,4096) repeats=10
  [ $simulate = 1 ] && shapes=(--shape 1,2,64) repeats=1
  timeout 120 "$rt" bench "$a" --target "$tgt" "${shapes[@]}" --repeats $repeats \
    --csv "$out/bench/$name.csv" || { echo "FAIL bench $name"; status=1; }
done
timeout 180 python3 "$root/scripts/device_bench.py" "$out/bench" "$out/bench-vs-torch.md" || status=1
{ echo "## 4. Benchmarks (attnc / PyTorch: time ratios, < 1 is faster)"; echo
  cat "$out/bench-vs-torch.md" 2>/dev/null || echo "(no comparison written)"; echo; } >>"$summary"
echo "=== 5. the Linformer table and the Reformer sweep ($(elapsed))"
mkdir -p "$out/sweep"
lin=(1024 2048 4096 8192 16384) tokens=16384 heads=16 repeats=5
[ $simulate = 1 ] && lin=(128 256) tokens=256 heads=2 repeats=1
shapes=(); for n in "${lin[@]}"; do shapes+=(--shape "1,$heads,$n"); done
for a in dense lowrank_k128 lowrank_k256; do
  timeout 150 "$rt" bench "$d/sweep/$a" --target "$tgt" "${shapes[@]}" --repeats $repeats \
    --csv "$out/sweep/linformer-$a.csv" >/dev/null || { echo "FAIL Linformer table: $a"; status=1; }
done
shapes=(); for n in "${lin[@]}"; do shapes+=(--shape "$((tokens / n > 0 ? tokens / n : 1)),$heads,$n"); done
for a in dense lsh; do
  timeout 150 "$rt" bench "$d/sweep/$a" --target "$tgt" "${shapes[@]}" --repeats $repeats \
    --csv "$out/sweep/lsh-$a.csv" >/dev/null || { echo "FAIL Reformer sweep: $a"; status=1; }
done
{ echo "## 5. The Linformer table and the Reformer sweep (attnc-rt bench)"; echo
  python3 "$root/scripts/device_sweeps.py" "$out/sweep" "$out/sweeps.md" >/dev/null &&
    cat "$out/sweeps.md" || echo "(no tables written)"; echo; } >>"$summary"
echo "=== 6. attnc from PyTorch ($(elapsed))"
# The C ABI as the runtime alone builds it: it loads the artifacts of
# device-prepare.sh (attnc_load); the package is the checkout's.
ninja -C "$b" -j "$jobs" attnc_capi >>"$out/build.log" 2>&1 || { echo "FAIL building libattnc"; status=1; }
sim=(); [ $simulate = 1 ] && sim=(--simulate)
ATTNC_LIBRARY="$b/lib/libattnc.so" PYTHONPATH="$root/bindings/python" timeout 180 \
  "${DEVICE_PYTHON:-python3}" "$root/scripts/device_torch.py" "$d/torch" "$d/bench" "$out/torch.md" \
  "${sim[@]}" || { echo "FAIL attnc from PyTorch (scripts/device_torch.py)"; status=1; }
{ echo "## 6. attnc from PyTorch (scripts/device_torch.py)"; echo
  cat "$out/torch.md" 2>/dev/null || echo "(no report written)"; echo; } >>"$summary"
echo "Finished in $(elapsed), status $status." | tee -a "$summary"
[ $simulate = 1 ] && finish 3
finish $status
