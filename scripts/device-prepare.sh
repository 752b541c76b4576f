#!/usr/bin/env bash
# Prepares device-inputs/ for scripts/device-check.sh (run here, where MLIR
# is): CUDA artifacts, their inputs' digests, CPU reference outputs,
# benchmark and training artifacts, the runtime-only attnc-rt and libattnc.so
# built here (with the libraries they need beyond the C/C++ runtime), and
# the header-only libraries the GPU machine lacks (CLI11, nlohmann-json) for
# when it must build instead. docs/device-check.md gives the device-tool
# calls that use it.
#
# Everything that travels (tracked files, untracked files git does not
# ignore, shared/, device-inputs/) is measured against 60 MiB at the end
# (scripts/device_size.py; the tool's limit is 64 MiB): over it, the ten
# largest items are named and this exits 1. The cases' inputs are remade on
# that machine (scripts/device_inputs.py) and checked against digests; the
# cases go packed (cases.tar.xz: their CPU outputs compress about 3:1).
#
# Environment:
#   DEVICE_PREPARE_NO_BUILD=1  skip scripts/build.sh (build/bin/attnc must exist)
#   DEVICE_PREPARE_TINY=1      the rehearsal's set (scripts/device-rehearsal.sh):
#                              D = 64, fp32 and fp16 cases only, two bench
#                              (dense, LSH) and three sweep artifacts, no
#                              GPU-only training artifacts, no CUDA 12 NVRTC
#   DEVICE_INPUTS=DIR          where to write (default: device-inputs/ in the checkout)
#   DEVICE_PREPARE_RUNTIME=DIR the runtime-only build whose bin/attnc-rt and
#                              lib/libattnc.so are carried (default: build-runtime-only)
#   DEVICE_PREPARE_JOBS=N      parallel compiles (default 2)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ "${DEVICE_PREPARE_NO_BUILD:-0}" = 1 ] || "$root/scripts/build.sh" "$root/build" >/dev/null
attnc="$root/build/bin/attnc"
[ -x "$attnc" ] || { echo "device-prepare: $attnc is missing (build it, or drop DEVICE_PREPARE_NO_BUILD)" >&2; exit 1; }
d="${DEVICE_INPUTS:-$root/device-inputs}"
tiny="${DEVICE_PREPARE_TINY:-0}"
rtb="${DEVICE_PREPARE_RUNTIME:-$root/build-runtime-only}"
pjobs="${DEVICE_PREPARE_JOBS:-2}"
rm -rf "$d" && mkdir -p "$d/include" "$d/cases" "$d/bench" "$d/torch" "$d/sweep" "$d/train"
cp -r /usr/include/CLI /usr/include/nlohmann "$d/include/"
echo "$([ "$tiny" = 1 ] && echo tiny || echo full) $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')" \
  >"$d/prepared"

# The runtime-only attnc-rt and libattnc.so built here: device-check.sh uses
# them when `attnc-rt info` runs there, and builds otherwise. Stripped, with
# every library ldd resolves beyond the C/C++ runtime, OpenMP and zlib (MPI's,
# on Debian) in bin/lib; device-check.sh puts bin/lib on their loader path only.
if [ -x "$rtb/bin/attnc-rt" ] && [ -f "$rtb/lib/libattnc.so" ]; then
  mkdir -p "$d/bin/lib"
  cp "$rtb/bin/attnc-rt" "$rtb/lib/libattnc.so" "$d/bin/"
  strip --strip-unneeded "$d/bin/attnc-rt" "$d/bin/libattnc.so" 2>/dev/null || true
  base='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libgomp|libz\.)'
  for lib in $(ldd "$rtb/bin/attnc-rt" "$rtb/lib/libattnc.so" | awk '$2 == "=>" && $3 ~ /^\// {print $1 " " $3}' |
    sort -u | awk -v base="$base" '$1 !~ base {print $2}'); do
    cp -L "$lib" "$d/bin/lib/"
  done
  { echo "attnc-rt and libattnc.so from $rtb, built $(date -r "$rtb/bin/attnc-rt" -u '+%F %T UTC')"
    echo "ldd (here):"; ldd "$rtb/bin/attnc-rt" "$rtb/lib/libattnc.so" | sed 's/ (0x[0-9a-f]*)//'
    echo "carried in bin/lib: $(cd "$d/bin/lib" && ls | tr '\n' ' ')"; } >"$d/bin/README"
  echo "device-prepare: carrying attnc-rt and libattnc.so ($(du -sh "$d/bin" | cut -f1)," \
    "with $(ls "$d/bin/lib" | wc -l) libraries: $(cd "$d/bin/lib" && ls | tr '\n' ' '))"
else
  echo "device-prepare: no $rtb/bin/attnc-rt or $rtb/lib/libattnc.so: device-check.sh will build there"
fi

# Every kernel family x dtype x head dim, against the CPU (f32) on the same
# inputs. D = 64 cases are compiled for sm_80, so the H200 re-tiles them at
# load (runtime/DeviceTiling.h); the others for sm_90.
declare -A family=(
  [dense]="attention a { mask causal mask padding param t(h) = 0.8 score s * t(h) }"
  [lowrank]="attention a { kv lowrank(k = 48, share = headwise) mask padding }"
  [lsh]="attention a { qk shared bucket lsh(buckets = 16, rounds = 2, chunk = 32, before = 1) mask causal mask padding }"
)
dtypes="fp32 fp16 bf16" dims="64 128 256"
[ "$tiny" = 1 ] && dtypes="fp32 fp16" dims="64"
jobs=()
for f in dense lowrank lsh; do
  for dtype in $dtypes; do
    for D in $dims; do
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
printf '%s\n' "${jobs[@]}" | xargs -P "$pjobs" -L 1 bash -c 'prepare_case $0 $1 $2 $3 $4 $5'
# Packed: the CPU outputs compress about 3:1 (device-check.sh unpacks them).
tar -C "$d" -cf - cases | xz -T"$pjobs" -6 >"$d/cases.tar.xz"
rm -rf "$d/cases"

# Artifacts for the GPU alone: only what the runtime loads is kept.
artifact() { # folder name spec seq d_model heads dtype objective
  printf '%s\nmodel m { vocab 256 seq %s d_model %s heads %s layers 1 dtype %s objective %s layer { attention a ffn } }\n' \
    "$3" "$4" "$5" "$6" "$7" "$8" >"$d/$1/$2.attn"
  "$attnc" compile "$d/$1/$2.attn" --target cuda --arch sm_90 -o "$d/$1/$2" >/dev/null 2>&1
  rm -f "$d/$1/$2"/model_* "$d/$1/$2/kernels.cpp" "$d/$1/$2/attn.mlir"
}
objective() { [[ "$1" == *causal* ]] && echo causal_lm || echo mlm; }

# Benchmarks (attnc-rt bench beside PyTorch, device-check step 5): fp16, sm_90.
bench() { # name spec seq D
  artifact bench "$1" "$2" "$3" "$((16 * $4))" 16 fp16 "$(objective "$2")"
}
bench dense_d64 "attention a { }" 4096 64
bench lsh_d64 "attention a { qk shared bucket lsh(buckets = 64, rounds = 4, chunk = 64, before = 1) }" 4096 64
if [ "$tiny" != 1 ]; then
  bench lowrank_d64 "attention a { kv lowrank(k = 256, share = headwise) }" 4096 64
  bench dense_d128 "attention a { }" 4096 128
  bench causal_d128 "attention a { mask causal }" 4096 128
fi
# The performance model's predictions for step 5's shapes (the emulator
# rehearsal's too), beside which device-check.sh prints the timings
# (scripts/device_perf.py, docs/perf-model.md): sm_90, as the artifacts.
for spec in "$d"/bench/*.attn; do
  name=$(basename "$spec" .attn)
  for shape in 4,16,1024 2,16,4096 1,2,64; do
    "$attnc" perf "$spec" --arch sm_90 --shape "$shape" --csv "$d/bench/$name.perf-$shape.csv" \
      >"$d/bench/$name.perf-$shape.log" 2>&1 || {
      echo "device-prepare: attnc perf $spec --shape $shape failed:" >&2
      tail -3 "$d/bench/$name.perf-$shape.log" >&2
      exit 1
    }
    rm -f "$d/bench/$name.perf-$shape.log"
  done
done

# PyTorch on the GPU (device-check step 7): f32 artifacts that the
# runtime-only libattnc there loads (attnc_load), checked against float64.
torch_artifact() { # name spec
  artifact torch "$1" "$2" 1024 512 8 fp32 "$(objective "$2")"
}
torch_artifact causal_f32_d64 "attention a { mask causal }"
torch_artifact alibi_f32_d64 "attention a { param slope(h) = alibi score s + slope(h) * float(kv - q) mask causal }"
torch_artifact lowrank_f32_d64 "attention a { kv lowrank(k = 32, share = headwise) }"

# The Linformer table and the Reformer sweep (device-check step 8): dense,
# low-rank k = 128 and 256, and LSH kernels for sequences up to 16384, fp16,
# D = 64, 16 heads.
sweep() { # name spec
  artifact sweep "$1" "$2" 16384 1024 16 fp16 mlm
}
sweep dense "attention a { }"
sweep lowrank_k128 "attention a { kv lowrank(k = 128, share = headwise) }"
[ "$tiny" = 1 ] || sweep lowrank_k256 "attention a { kv lowrank(k = 256, share = headwise) }"
sweep lsh "attention a { qk shared bucket lsh(buckets = 64, rounds = 4, chunk = 64, before = 1) }"

# Training (device-check step 6). Attention on the step's buffers (dense,
# shared-QK, low-rank, fp16, bf16) against the host path on the same GPU
# (test/train/device-attention.test); the rehearsal runs two of its models
# on the emulator.
t="$d/train"
"$attnc" compile "$root/test/train/Inputs/device-attention.attn" --target cuda --arch sm_90 --plan-batch 2 -o "$t/devattn" >/dev/null
cat "$root"/docs/*.md >"$t/corpus.txt" # the MLM models' text (that machine may lack any)
if [ "$tiny" != 1 ]; then
  # README's duplication model (batch 8, its train block) and dup64 (batch
  # 16) with, as the reference, the CPU artifact's losses over the same
  # first steps.
  "$attnc" compile "$root/examples/reformer_duplicate.attn" --target cuda --arch sm_90 --plan-batch 8 -o "$t/dup" >/dev/null
  "$attnc" compile "$root/test/train/Inputs/dup64.attn" --target cuda --arch sm_90 --plan-batch 16 -o "$t/cuda" >/dev/null
  "$attnc" compile "$root/test/train/Inputs/dup64.attn" --target cpu --plan-batch 16 -o "$t/cpu" >/dev/null
  "$root/build/bin/attnc-rt" train "$t/cpu" --data synthetic:duplicate --steps 10 --lr 3e-3 --warmup 20 \
    --checkpoint-every 10 --out "$t/cpu-run" 2>/dev/null | tail -1
  rm -rf "$t/cpu" "$t/cpu-run"/*.safetensors # only its losses (train.csv) are compared

  # The Volta kernels on the lent GPU (device-check step 9) are compute_70
  # PTX, which only a CUDA 12 NVRTC makes: that machine has none, so the
  # project's (scripts/bootstrap.sh) goes along packed (about 31 MB).
  nv="$root/.deps/nvrtc-cu12"
  tar -C "$nv" -cf - nvidia/cuda_nvrtc/lib/libnvrtc.so.12 $(cd "$nv" && ls nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.*) |
    xz -T"$pjobs" -6 >"$d/nvrtc12.tar.xz"
fi

echo "device-prepare: $(du -sm "$d" | cut -f1) MiB in $d"
# Everything that travels, against 60 MiB (the tool's limit is 64 MiB).
python3 "$root/scripts/device_size.py" --root "$root" --carry "$d"
