#!/usr/bin/env bash
# The prepared GPU check (docs/device-check.md), for the device machine:
# CUDA, cmake, ninja, PyTorch, no MLIR. One call of the device tool with
# device-inputs/ (scripts/device-prepare.sh) carried along:
#   run  command "bash scripts/device-check.sh"  carry ["device-inputs"]  timeout_s 540
#
# It works in a scratch folder ($DEVICE_CHECK_WORK, default device-work/) and
# after every step, and every 15 s, replaces three files in $OUT (each
# written aside, copied in under a temporary name and renamed), so a kill at
# any moment keeps every check finished before it:
#   summary.md        the steps' table, then each check's row: ok, FAIL or skip, why, figures
#   device-check.log  the console
#   results.tar.xz    every per-case log, CSV, comparison, table and sanitizer report
#                     (no safetensors outputs or checkpoints; at most 16 MiB)
# It prints a short table of the steps last: the tool returns the output's tail.
#
# Steps, in order of evidence per second (probe and runtime always run):
#   1 probe: GPU, driver, nvcc, g++, torch, NCCL (the nvidia-nccl wheel), compute-sanitizer, cuobjdump
#   2 runtime: the runtime-only attnc-rt and libattnc.so carried in device-inputs/bin when
#     `attnc-rt info` runs here, else built (cmake + ninja, build-device/)
#   3 every kernel family x dtype x head dim against the CPU
#   4 compute-sanitizer: memcheck for each family, racecheck for dense
#   5 dense, causal, low-rank and LSH timings (attnc-rt bench) beside torch SDPA, then
#     FlexAttention with what is left of the step's budget
#   6 training: dup64 against the CPU's losses, the device AdamW against the host's,
#     attention on the step's buffers against the host path, NCCL against device copies,
#     and (full mode) README's duplication model to >= 99 % held-out accuracy
#   7 the PyTorch op on CUDA tensors (scripts/device_torch.py)
#   8 the Linformer table and the Reformer sweep
#   9 the Volta kernels as compute_70 PTX, JIT-compiled by the driver
#
# Budgets, seconds. Each step runs under `timeout` with its budget, and the
# script under a deadline of the column's total: a step is cut to what is
# left, or skipped when under 5 s is. "full" and "quick" are for an H100 with
# 16 cores; "sim" is the rehearsal on the SIMT emulator on a 2-core CI
# machine (scripts/device-rehearsal.sh). The H100 figures are estimates
# from the work (no GPU run yet); the "measured" ones were seen here.
#
#  step          full quick  sim  basis
#@ 1 probe       15   10   30  nvidia-smi, nvcc, g++ (<1 s each); one python importing torch and initialising CUDA (~5 s); one for nvidia.nccl
#@ 2 runtime     15   15   20  carried: unpack the cases (<1 s), `attnc-rt info` (~1 s). Building instead: cmake + ninja, 61 targets, 477 s of compiles summed on the CPU machine (~40 s on 16 cores); its timeout is then 150 s, taken from the deadline: the last steps are cut
#@ 3 kernels     60   30  150  27 cases (quick 18), 16 at once: inputs in pure Python (~1 s), NVRTC of the case's kernels (a whole spec's take 4.5 s on one core of the CPU machine), the run (<1 s), a pure-Python comparison (~1 s): two waves, ~20 s. Sim: 6 cases, 23 s measured (88 s with the machine busy)
#@ 4 sanitizer   45   25    5  4 runs at once of one small case: ~10 s of tool start-up, kernels 10-100x slower on 203 x 64 (<5 s), racecheck the slowest; kernels cached by step 3
#@ 5 timings     75   25  120  5 artifacts' NVRTC at once (~5 s), then 10 timed shapes (<1 s of kernels each, ~2 s per process); SDPA (~10 s with the torch import); FlexAttention (torch.compile, ~20-40 s a shape) gets the rest. Sim: 15-44 s measured
#@ 6 training    90   45  240  in parallel: each model's host C++ (g++ -O3) and NVRTC (~10-30 s), then 3-300 steps (the 300-step duplication model takes ~20 s on 2 CPU cores by its spec, full mode only); 14 runs in 6 chains. Sim: 2 models, 34-130 s measured
#@ 7 torch       90   60   60  torch import + 3 f32 artifacts' NVRTC (~15 s), float64 references, torch.compile (~20 s), graph capture; its timings (FlexAttention compiles) are cut by the budget. Sim: 26 s measured
#@ 8 sweeps      40   12  120  4 artifacts' NVRTC at once (~5 s), 5 x 5 shapes x 5 repeats of <20 ms, ~2 s per process; quick: N <= 4096, 3 repeats. Sim: 9-18 s measured
#@ 9 volta       40   13  120  unpack the CUDA 12 NVRTC (~3 s), 18 cases (quick 9) through NVRTC 12 and the driver's compute_70 JIT, 16 at once: two waves of ~10 s. Sim: 3 fp16 cases, 32-35 s measured
#@ P publish     10    5   15  summary, then tar + xz of the logs after each step (~1 s)
#@ T total      480  240  880  the sum
#
# Environment:
#   OUT                      where the three files go (default device-out/)
#   DEVICE_CHECK_STEPS=3,4   the steps to run (a comma list; 1 and 2 always run)
#   DEVICE_CHECK_QUICK=1     the quick mode (the "quick" column, within 240 s): D = 64 and 128
#                            cases only (Volta: 64), one benchmark shape and no FlexAttention,
#                            no 300-step duplication model, sweeps to N = 4096
#   DEVICE_CHECK_SIMULATE=1  without a GPU: the rehearsal on the SIMT emulator (the D = 64
#                            cases, small shapes); the GPU-only checks are skipped with
#                            their reason. Exits 3 still
#   DEVICE_CHECK_DEADLINE=S  another deadline than the column's total (a shorter call)
#   DEVICE_CHECK_WORK=DIR    the scratch folder (emptied first)
#   DEVICE_CHECK_BUILD=1     build even when the carried binaries run
#   DEVICE_INPUTS=DIR        the prepared inputs (default device-inputs/)
#   DEVICE_PYTHON            the Python with torch (default python3)
#   DEVICE_CHECK_JOBS        parallel processes (default: nproc)
# Exit status: 0 when every check passed, 1 when one failed (or a step timed
# out), 3 without a GPU (after steps 1 and 2; with DEVICE_CHECK_SIMULATE=1
# after the rehearsal).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
titles=("" "probe" "attnc-rt: carried or built" "kernels vs the CPU" "compute-sanitizer"
  "timings beside torch" "training subset" "PyTorch op" "Linformer table, Reformer sweep"
  "Volta PTX")

#----------------------------------------------------------------------------
# Helpers of the steps (each step runs as `bash device-check.sh --step N`)
#----------------------------------------------------------------------------

# budget KEY COLUMN: a number of the header's "#@" table (4 full, 5 quick, 6 sim).
budget() { awk -v k="$1" -v c="$2" '$1 == "#@" && $2 == k { print $c }' "$self"; }

# row ok|FAIL|skip TEXT: one check's line, on the console and in the summary.
row() {
  local v="$1" tag="ok  "
  shift
  [ "$v" = FAIL ] && tag=FAIL
  [ "$v" = skip ] && tag=skip
  echo "$tag $*"
  echo "$tag $*" >>"$state/rows-$STEP"
}
# row_line "ok  TEXT" | "FAIL TEXT": a verdict line as the checks print them.
row_line() {
  case "$1" in
  "ok  "*) row ok "${1:5}" ;;
  FAIL*) row FAIL "${1:5}" ;;
  *) row FAIL "${2:-a check} gave no verdict: ${1:-(nothing)}" ;;
  esac
}
key() { echo "$*" >"$state/key-$STEP"; }                   # the step's key figure
skip_step() { echo "$*" >"$state/skip-$STEP"; echo "skip step $STEP: $*"; }
attach() { [ -s "$1" ] && { cat "$1"; echo; } >>"$state/extra-$STEP.md"; }
setenv() { printf 'export %s=%q\n' "$1" "$2" >>"$state/env"; export "$1=$2"; }
# tleft [CAP]: seconds left of this step's budget, less a margin for its
# verdicts, at most CAP and at least 1.
tleft() {
  local l=$((STEP_DEADLINE - $(date +%s)))
  [ -n "${1:-}" ] && [ "$1" -lt "$l" ] && l=$1
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}
# The cases a step runs: all, or D = 64 and 128 (quick), or D = 64 (rehearsal);
# `volta`: D = 64 and 128, D = 64 in quick mode, fp16 at D = 64 (m8n8k4) in
# the rehearsal.
case_names() {
  local pat='_d[0-9]+$'
  if [ "${1:-}" = volta ]; then
    pat='_d(64|128)$'
    [ "$quick" = 1 ] && pat='_d64$'
    [ "$simulate" = 1 ] && pat='_fp16_d64$'
  else
    [ "$quick" = 1 ] && pat='_d(64|128)$'
    [ "$simulate" = 1 ] && pat='_d64$'
  fi
  ls "$cases" | grep -E "$pat"
}
# ensure_inputs CASE: its inputs remade as device-prepare.sh made them
# (scripts/device_inputs.py) in the scratch folder, checked against its digests.
ensure_inputs() {
  local c="$cases/$1" w="$work/cases/$1"
  [ -f "$w/ok" ] && return 0
  mkdir -p "$w" && cp "$c/spec.attn" "$c/inputs.sha256" "$w/"
  if ! python3 "$root/scripts/device_inputs.py" "$w" $(cat "$c/shape") >"$w/log" 2>&1; then
    echo "FAIL $1: scripts/device_inputs.py failed: $(tail -1 "$w/log")"
    return 1
  elif ! (cd "$w" && sha256sum --quiet -c inputs.sha256) >>"$w/log" 2>&1; then
    echo "FAIL $1: its remade inputs differ from device-prepare.sh's (inputs.sha256)"
    return 1
  fi
  touch "$w/ok"
}
# run_case CASE [ARCH]: the case on the GPU (or the emulator), compared with
# the CPU's outputs (scripts/device_compare.py: its tolerances per dtype).
# ARCH (sm_70) runs that architecture's kernels here.
run_case() {
  local c="$cases/$1" in="$work/cases/$1" tag="$1" sub=3-kernels
  local w=() as=()
  [ -f "$in/weights.safetensors" ] && w=(--weights "$in/weights.safetensors")
  [ -n "${2:-}" ] && as=(--as-arch "$2") && tag="$1@$2" && sub=9-volta
  timeout "$(tleft)" "$rt" run "$c/art" --target "$tgt" "${as[@]}" --inputs "$in/in.safetensors" "${w[@]}" \
    --grad "$in/dout.safetensors" --output "$work/out/$tag.gpu.safetensors" >"$res/$sub/$tag.log" 2>&1
  local rc=$?
  if [ $rc = 124 ]; then
    echo "FAIL $tag: cut at the step's budget"
    return 1
  elif [ $rc != 0 ]; then
    echo "FAIL $tag: attnc-rt exited $rc: $(tail -1 "$res/$sub/$tag.log")"
    return 1
  fi
  python3 "$root/scripts/device_compare.py" "$c/cpu.safetensors" "$work/out/$tag.gpu.safetensors" "$tag"
}
# case_rows FILE TAG...: one row per case from device_compare.py's lines.
case_rows() {
  local f="$1" tag lines worst
  shift
  for tag in "$@"; do
    lines=$(grep -F -e "ok   $tag " -e "FAIL $tag " -e "FAIL $tag:" "$f")
    if grep -q '^FAIL' <<<"$lines"; then
      row FAIL "$(grep '^FAIL' <<<"$lines" | cut -c6- | tr '\n' ';' | sed 's/;$//; s/;/; /g')"
    elif [ -z "$lines" ]; then
      row FAIL "$tag: no comparison (see its log)"
    else
      worst=$(sed -n 's/.*= \([0-9.e+-]*\) (tol \([0-9.e+-]*\)).*/\1 (tolerance \2)/p' <<<"$lines" | sort -g | tail -1)
      row ok "$tag: $(awk '{print $3}' <<<"$lines" | paste -sd, -) within $worst of the CPU"
    fi
  done
}
# bench_rows CSV NAME: the artifact's timings as one row.
bench_rows() {
  local figures
  figures=$(awk -F, 'NR > 1 { printf "%s%s,%s,%s,%s: fwd %.3f ms, bwd %.3f ms", (n++ ? "; " : ""), $4, $5, $6, $7, $9, $11 }' "$1")
  row ok "$2 ($(awk -F, 'NR == 2 {print $2 ", " $3}' "$1")): ${figures:-no rows}"
}
export -f ensure_inputs run_case tleft

#----------------------------------------------------------------------------
# The steps
#----------------------------------------------------------------------------

step_1() { # probe: what this machine has
  local g="" torch nccl tool
  mkdir -p "$res/1-probe"
  if command -v nvidia-smi >/dev/null; then
    g=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm \
      --format=csv,noheader 2>&1 | head -2 | paste -sd';' -)
    timeout 20 nvidia-smi >"$res/1-probe/nvidia-smi.txt" 2>&1
    if [ -n "$g" ] && ! grep -qi "fail\|no devices\|error" <<<"$g"; then
      row ok "GPU (nvidia-smi: name, driver, compute capability, memory, max SM clock): $g"
    else
      row skip "GPU: nvidia-smi says: ${g:-nothing}"
    fi
  else
    row skip "GPU: no nvidia-smi"
  fi
  local nvcc
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
  if [ -n "$nvcc" ]; then
    row ok "nvcc: $("$nvcc" --version | grep -o 'release [^,]*, V[0-9.]*') ($nvcc)"
  else
    row skip "nvcc: none"
  fi
  for tool in g++ cmake ninja; do
    if command -v $tool >/dev/null; then
      row ok "$tool: $($tool --version 2>&1 | head -1)"
    else
      row skip "$tool: none"
    fi
  done
  torch=$(timeout 60 "$py" -c "
import torch
cuda = torch.cuda.is_available()
print('torch %s, CUDA %s, %s' % (torch.__version__, torch.version.cuda,
      torch.cuda.get_device_name() if cuda else 'no CUDA device'))" 2>&1 | tail -1)
  if [[ "$torch" == torch* ]]; then
    row ok "$py ($("$py" --version 2>&1)): $torch"
    setenv have_torch 1
  else
    row skip "torch: none in $py ($torch)"
    setenv have_torch 0
  fi
  nccl=$(timeout 30 "$py" -c "
import os, nvidia.nccl
print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null | tail -1)
  if [ -n "$nccl" ] && [ -f "$nccl" ]; then
    row ok "NCCL: the nvidia-nccl wheel of $py: $nccl"
    setenv nccl_wheel "$nccl"
  else
    row skip "NCCL: no nvidia.nccl in $py$(ldconfig -p 2>/dev/null | grep -q libnccl.so.2 && echo '; the loader knows a libnccl.so.2')"
    setenv nccl_wheel ""
  fi
  local san
  san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  setenv san "$san"
  if [ -n "$san" ]; then
    row ok "compute-sanitizer: $("$san" --version 2>&1 | grep -i version | head -1) ($san)"
  else
    row skip "compute-sanitizer: none"
  fi
  tool=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
  if [ -n "$tool" ]; then row ok "cuobjdump: $tool"; else row skip "cuobjdump: none"; fi
  row ok "CPU: $(nproc) cores; $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) memory"
  local gk="no GPU" tk="no torch"
  [ -n "$g" ] && ! grep -qi "fail\|no devices\|error" <<<"$g" && gk=$(sed 's/;.*//' <<<"$g" | cut -d, -f1,2)
  [ "$have_torch" = 1 ] && tk=$(cut -d, -f1,2 <<<"$torch")
  key "$gk; $tk; NCCL wheel: $([ -n "$nccl_wheel" ] && echo yes || echo no); compute-sanitizer: $([ -n "$san" ] && echo yes || echo no)"
}

step_2() { # attnc-rt and libattnc.so: carried, or built here
  local dir="$res/2-runtime" carried="$d/bin/attnc-rt" how=""
  mkdir -p "$dir"
  # The cases (their CPU outputs compress 3:1) come packed.
  if [ -d "$d/cases" ]; then
    setenv cases "$d/cases"
  elif [ -f "$d/cases.tar.xz" ] && python3 -c "
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall(sys.argv[2], filter='data')
    except TypeError:  # a Python without extraction filters
        t.extractall(sys.argv[2])" "$d/cases.tar.xz" "$work/inputs" 2>"$dir/unpack.log"; then
    setenv cases "$work/inputs/cases"
  else
    row FAIL "no prepared inputs at $d ($(tail -1 "$dir/unpack.log" 2>/dev/null)): run scripts/device-prepare.sh on the CPU machine and carry device-inputs"
    return 1
  fi
  if [ -x "$carried" ] && [ "${DEVICE_CHECK_BUILD:-0}" != 1 ]; then
    # A wrapper gives the carried binary its libraries (MPI's, on Debian)
    # without putting them in front of every other program here.
    mkdir -p "$work/bin"
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
      "$d/bin/lib" "$carried" >"$work/bin/attnc-rt"
    chmod +x "$work/bin/attnc-rt"
    LD_LIBRARY_PATH="$d/bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$carried" "$d/bin/libattnc.so" \
      >"$dir/ldd.txt" 2>&1
    if ATTNC_KERNEL_INCLUDE="$root/kernels" timeout 30 "$work/bin/attnc-rt" info >"$dir/info.txt" 2>&1 &&
      grep -q "^GPU:" "$dir/info.txt" && [ -f "$d/bin/libattnc.so" ]; then
      how="carried"
      setenv rt "$work/bin/attnc-rt"
      setenv rtbin "$carried"
      setenv lib "$d/bin/libattnc.so"
      setenv rtlibs "$d/bin/lib"
      setenv ATTNC_KERNEL_INCLUDE "$root/kernels"
      row ok "attnc-rt and libattnc.so: carried ($(head -1 "$d/bin/README" 2>/dev/null)); libraries carried beside them: $(ls "$d/bin/lib" | paste -sd' ' -)"
    else
      row skip "the carried attnc-rt does not run here ($(grep 'not found' "$dir/ldd.txt" | sort -u | paste -sd';' -)$(tail -1 "$dir/info.txt")): building instead"
    fi
  fi
  if [ -z "$how" ]; then
    if [ "$simulate" = 1 ] && [ "${DEVICE_CHECK_BUILD:-0}" != 1 ]; then
      row FAIL "no carried attnc-rt that runs, and the rehearsal builds only with DEVICE_CHECK_BUILD=1"
      return 1
    fi
    local b="$root/build-device" t0
    t0=$(date +%s)
    # No gtest there either: the runner and the C ABI alone.
    if ! cmake -G Ninja -S "$root" -B "$b" -DCMAKE_BUILD_TYPE=Release -DATTNC_RUNTIME_ONLY=ON \
      -DATTNC_BUILD_TESTS=OFF -DATTNC_EXTRA_INCLUDE="$d/include" >"$dir/cmake.log" 2>&1; then
      tail -30 "$dir/cmake.log"
      row FAIL "cmake failed: $(tail -1 "$dir/cmake.log")"
      return 1
    fi
    if ! ninja -C "$b" -j "$jobs" attnc-rt attnc_capi >"$dir/build.log" 2>&1; then
      tail -40 "$dir/build.log"
      row FAIL "the build failed: $(grep -m1 'error' "$dir/build.log")"
      return 1
    fi
    how="built in $(($(date +%s) - t0)) s"
    setenv rt "$b/bin/attnc-rt"
    setenv rtbin "$b/bin/attnc-rt"
    setenv lib "$b/lib/libattnc.so"
    setenv rtlibs ""
    row ok "attnc-rt and libattnc.so: built here (runtime-only, cmake + ninja -j $jobs) in $(($(date +%s) - t0)) s"
  fi
  "$rt" info >"$dir/info.txt" 2>&1
  cat "$dir/info.txt"
  local gline nline
  gline=$(grep "^GPU:" "$dir/info.txt")
  nline=$(grep "^NCCL:" "$dir/info.txt")
  if grep -q "^GPU: .*(sm_[0-9]" "$dir/info.txt"; then
    setenv gpu 1
    setenv tgt cuda
    row ok "attnc-rt info: $gline"
  else
    setenv gpu 0
    setenv tgt cuda-sim
    row skip "attnc-rt info: ${gline:-no GPU line}"
  fi
  # The runtime's own search for NCCL (no $ATTNC_NCCL set by this script yet).
  if [[ "$nline" == "NCCL: none"* ]] || [ -z "$nline" ]; then
    row skip "NCCL as the runtime finds it alone: ${nline#NCCL: }"
  else
    row ok "NCCL as the runtime finds it alone: ${nline#NCCL: }"
  fi
  key "$how; $(cut -c1-70 <<<"${gline#GPU: }")"
}

step_3() { # every kernel family x dtype x head dim against the CPU
  local dir="$res/3-kernels" names n nbad
  mkdir -p "$dir" "$work/out"
  names=$(case_names)
  printf '%s\n' $names | xargs -P "$jobs" -I{} bash -c 'ensure_inputs {}' >"$dir/inputs.txt" 2>&1
  if grep -q "^FAIL" "$dir/inputs.txt"; then
    while read -r l; do row_line "$l"; done < <(grep "^FAIL" "$dir/inputs.txt")
  else
    row ok "inputs: $(wc -w <<<"$names") cases' inputs remade, equal to device-prepare.sh's (sha256)"
  fi
  printf '%s\n' $names | xargs -P "$jobs" -I{} bash -c 'run_case {}' >"$dir/compare.txt" 2>&1
  sort -o "$dir/compare.txt" "$dir/compare.txt"
  cat "$dir/compare.txt"
  case_rows "$dir/compare.txt" $names
  grep -h "re-tiled" "$dir"/*.log 2>/dev/null | sort -u | head -10 >"$dir/retiled.txt"
  if [ -s "$dir/retiled.txt" ]; then
    { echo "Re-tiled at load:"; echo; echo '```'; cat "$dir/retiled.txt"; echo '```'; } >"$dir/retiled.md"
    attach "$dir/retiled.md"
  fi
  n=$(wc -w <<<"$names")
  nbad=$(grep -h '^FAIL' "$dir/compare.txt" | awk '{print $2}' | tr -d ':' | sort -u | wc -l)
  key "$((n - nbad)) of $n cases pass ($([ "$simulate" = 1 ] && echo "SIMT emulator, " )D $(printf '%s\n' $names | sed 's/.*_d//' | sort -un | paste -sd/ -))"
}

step_4() { # compute-sanitizer: memcheck for each family, racecheck for dense
  local dir="$res/4-sanitizer" runs="dense:memcheck lowrank:memcheck lsh:memcheck dense:racecheck" r f tool c w
  [ "$gpu" = 1 ] || { skip_step "no GPU: compute-sanitizer needs one"; return 0; }
  [ -n "$san" ] || { skip_step "no compute-sanitizer on this machine"; return 0; }
  mkdir -p "$dir"
  for r in $runs; do
    f=${r%%:*} tool=${r##*:} c="${f}_fp16_d64"
    ensure_inputs "$c" || { row FAIL "$tool $c: no inputs"; continue; }
    (
      w=()
      [ -f "$work/cases/$c/weights.safetensors" ] && w=(--weights "$work/cases/$c/weights.safetensors")
      LD_LIBRARY_PATH="${rtlibs:+$rtlibs:}${LD_LIBRARY_PATH:-}" timeout "$(tleft)" \
        "$san" --tool "$tool" --error-exitcode 9 "$rtbin" run "$cases/$c/art" --target cuda \
        --inputs "$work/cases/$c/in.safetensors" "${w[@]}" --grad "$work/cases/$c/dout.safetensors" \
        --output "$work/out/san-$f-$tool.safetensors" >"$dir/$f-$tool.log" 2>&1
      echo $? >"$dir/$f-$tool.rc"
    ) &
  done
  wait
  local ok=0 n=0
  for r in $runs; do
    f=${r%%:*} tool=${r##*:} n=$((n + 1))
    if [ "$(cat "$dir/$f-$tool.rc" 2>/dev/null)" = 0 ]; then
      ok=$((ok + 1))
      row ok "$tool ${f}_fp16_d64: $(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$dir/$f-$tool.log" | tail -1)"
    else
      row FAIL "$tool ${f}_fp16_d64 (exit $(cat "$dir/$f-$tool.rc" 2>/dev/null); 124: timed out): $(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|Error" "$dir/$f-$tool.log" | head -2 | tr '\n' ' ')"
    fi
  done
  key "$ok of $n clean"
}

step_5() { # timings beside torch SDPA, then FlexAttention
  local dir="$res/5-bench" a name shapes=(--shape 4,16,1024 --shape 2,16,4096) repeats=10 left
  mkdir -p "$dir"
  [ "$quick" = 1 ] && shapes=(--shape 2,16,4096) repeats=5
  [ "$simulate" = 1 ] && shapes=(--shape 1,2,64) repeats=1
  local arts=("$d"/bench/*/)
  if [ "$simulate" = 1 ]; then
    # On the emulator the timings are no figures: the runs at once.
    printf '%s\n' "${arts[@]}" | xargs -P "$jobs" -I{} sh -c \
      'n=$(basename {}); timeout '"$(tleft)"' "$rt" bench {} --target "$tgt" --shape 1,2,64 --repeats 1 --csv "'"$dir"'/$n.csv" >"'"$dir"'/$n.log" 2>&1 || echo "FAIL bench $n: exit $?"' \
      >"$dir/fails.txt"
  else
    # The kernels compiled at once (a small shape), then timed one by one.
    printf '%s\n' "${arts[@]}" | xargs -P "$jobs" -I{} sh -c \
      'timeout '"$(tleft 60)"' "$rt" bench {} --target cuda --shape 1,2,64 --repeats 1 >/dev/null 2>&1' || true
    : >"$dir/fails.txt"
    for a in "${arts[@]}"; do
      name=$(basename "$a")
      timeout "$(tleft)" "$rt" bench "$a" --target "$tgt" "${shapes[@]}" --repeats $repeats \
        --csv "$dir/$name.csv" >"$dir/$name.log" 2>&1 || echo "FAIL bench $name: exit $?" >>"$dir/fails.txt"
    done
  fi
  for a in "${arts[@]}"; do
    name=$(basename "$a")
    if grep -q "^FAIL bench $name:" "$dir/fails.txt"; then
      row FAIL "attnc-rt bench $name: $(grep "^FAIL bench $name:" "$dir/fails.txt" | cut -d: -f2-); $(tail -1 "$dir/$name.log")"
    else
      bench_rows "$dir/$name.csv" "$name"
    fi
  done
  # The performance model's predictions (attnc perf, made by device-prepare.sh
  # for these artifacts and shapes) beside the timings: docs/perf-model.md.
  if python3 "$root/scripts/device_perf.py" "$dir" "$d/bench" "$dir/model.md" --key="$dir/model-key.txt" \
    >"$dir/model.log" 2>&1; then
    row ok "the performance model beside the timings ($([ "$simulate" = 1 ] && echo "emulator: no figures; ")sm_90 model, H100 SXM5 rates): $(cat "$dir/model-key.txt")"
    { echo "Measured against predicted (attnc perf, sm_90 with the H100 SXM5's rates):"; echo; cat "$dir/model.md"; } >"$dir/model-attach.md"
    attach "$dir/model-attach.md"
  else
    row FAIL "scripts/device_perf.py: $(tail -1 "$dir/model.log")"
  fi
  if [ "$gpu" != 1 ]; then
    row skip "torch SDPA and FlexAttention beside: no GPU"
    key "${#arts[@]} artifacts run on the SIMT emulator (no figures)"
    return 0
  fi
  if [ "$have_torch" != 1 ]; then
    row skip "torch SDPA and FlexAttention beside: no torch in $py"
    key "${#arts[@]} artifacts timed; no torch"
    return 0
  fi
  # The CSVs alone, for device_bench.py.
  mkdir -p "$dir/csv" && cp "$dir"/*.csv "$dir/csv/" 2>/dev/null
  if timeout "$(tleft)" "$py" "$root/scripts/device_bench.py" "$dir/csv" "$dir/bench-vs-sdpa.md" --flex=no \
    --key="$dir/key.txt" >"$dir/sdpa.log" 2>&1; then
    row ok "SDPA beside attnc: $(cat "$dir/key.txt" 2>/dev/null || echo 'no rows')"
  else
    row FAIL "scripts/device_bench.py (SDPA) exited $?: $(tail -1 "$dir/sdpa.log")"
  fi
  { echo "Time ratios attnc / torch (< 1: attnc is faster):"; echo; cat "$dir/bench-vs-sdpa.md"; } >"$dir/sdpa.md" 2>/dev/null
  attach "$dir/sdpa.md"
  key "$(cat "$dir/key.txt" 2>/dev/null || echo "${#arts[@]} artifacts timed")"
  left=$(tleft)
  if [ "$quick" = 1 ]; then
    row skip "FlexAttention: left out in quick mode"
  elif [ "$left" -lt 15 ]; then
    row skip "FlexAttention: only $left s left of the step's budget"
  else
    timeout "$left" "$py" "$root/scripts/device_bench.py" "$dir/csv" "$dir/bench-vs-flex.md" --flex=only \
      >"$dir/flex.log" 2>&1
    local rc=$? nflex
    nflex=$(grep -c "| FlexAttention |" "$dir/bench-vs-flex.md" 2>/dev/null)
    if [ $rc = 0 ]; then
      row ok "FlexAttention beside attnc: ${nflex:-0} rows ($(grep -c "FlexAttention failed" "$dir/bench-vs-flex.md") failed to compile)"
    elif [ $rc = 124 ]; then
      row skip "FlexAttention: cut at its cap ($left s) after ${nflex:-0} rows (torch.compile is the slow part)"
    else
      row FAIL "scripts/device_bench.py (FlexAttention) exited $rc: $(tail -1 "$dir/flex.log")"
    fi
    { echo "FlexAttention (torch.compile'd), the time left of this step:"; echo
      cat "$dir/bench-vs-flex.md"; } >"$dir/flex.md" 2>/dev/null
    attach "$dir/flex.md"
  fi
}

step_6() { # training: dup64 vs the CPU, AdamW, attention on the step's buffers, NCCL
  local t="$d/train" dir="$res/6-training" engine=() m kind tol ac exchange=nccl line
  mkdir -p "$dir"
  [ "$simulate" = 1 ] && engine=(--engine cuda-sim) exchange=host
  if [ "$gpu" = 1 ]; then
    # NCCL for the device exchange: the wheel's when the runtime's own
    # search (step 2) is to be bypassed or found none.
    if [ -z "${ATTNC_NCCL:-}" ] && [ -n "${nccl_wheel:-}" ]; then
      export ATTNC_NCCL="$nccl_wheel"
    fi
    # The data-parallel GPU exchange's engine (runtime/dist/Nccl.h) with one
    # rank: a communicator, collectives on device buffers against host values.
    if timeout "$(tleft 60)" "$rt" info --collectives >"$dir/collectives.txt" 2>&1; then
      row ok "NCCL, one rank ($(grep "^NCCL:" "$dir/collectives.txt" | cut -c7-); ATTNC_NCCL=${ATTNC_NCCL:-unset}): $(grep "^collectives:" "$dir/collectives.txt")"
    elif grep -q "^NCCL: none" "$dir/collectives.txt"; then
      row skip "NCCL, one rank: none found (ATTNC_NCCL=${ATTNC_NCCL:-unset}): $(grep "^NCCL:" "$dir/collectives.txt")"
    else
      row FAIL "NCCL, one rank (ATTNC_NCCL=${ATTNC_NCCL:-unset}): $(grep "^NCCL:\|collectives" "$dir/collectives.txt" | tail -2 | tr '\n' ' ')"
    fi
  fi
  # Each chain in the background, the GPU shared: the host compiles of the
  # models' steps are the long part and run at once.
  if [ "$gpu" = 1 ]; then
    ( # dup64: the first 10 steps against the CPU's losses (same data, weights, schedule).
      if timeout "$(tleft)" "$rt" train "$t/cuda" --data synthetic:duplicate --steps 10 --lr 3e-3 --warmup 20 \
        --checkpoint-every 10 --out "$dir/gpu-f32" >"$dir/gpu-f32.log" 2>&1; then
        line=$(python3 - "$t/cpu-run/train.csv" "$dir/gpu-f32/train.csv" <<'PY'
import sys
rows = lambda p: [l.split(',') for l in open(p).read().split()[1:]]
cpu, gpu = rows(sys.argv[1]), rows(sys.argv[2])
worst = max(abs(float(a[1]) - float(b[1])) / abs(float(a[1])) for a, b in zip(cpu, gpu))
ok = worst < 1e-3 and len(gpu) == 10
print(("ok  " if ok else "FAIL") + f" dup64 GPU f32 vs CPU losses over {min(len(cpu), len(gpu))} of 10 steps: worst relative difference {worst:.2e}")
PY
        )
      else
        line="FAIL dup64 gpu-f32: attnc-rt train exited non-zero: $(tail -1 "$dir/gpu-f32.log")"
      fi
      row_line "$line" "dup64"
      # The device AdamW (the default) against the host AdamW on downloaded
      # gradients: without clipping both round every operation alone, so the
      # checkpoints must be bit-identical (they are on the emulator).
      for o in device host; do
        flag=()
        [ "$o" = host ] && flag=(--host-optimizer)
        timeout "$(tleft)" "$rt" train "$t/cuda" --data synthetic:duplicate --steps 10 --lr 3e-3 --warmup 20 \
          --clip 0 --checkpoint-every 10 "${flag[@]}" --out "$dir/gpu-adamw-$o" >"$dir/gpu-adamw-$o.log" 2>&1 &
      done
      wait
      if cmp -s "$dir/gpu-adamw-device/ckpt-10.safetensors" "$dir/gpu-adamw-host/ckpt-10.safetensors"; then
        row ok "device AdamW vs host AdamW, 10 steps without clipping: bit-identical checkpoints"
      elif [ ! -f "$dir/gpu-adamw-device/ckpt-10.safetensors" ] || [ ! -f "$dir/gpu-adamw-host/ckpt-10.safetensors" ]; then
        row FAIL "device AdamW vs host AdamW: a run did not finish ($(tail -qn1 "$dir"/gpu-adamw-*.log | tr '\n' ' '))"
      else
        row FAIL "device AdamW vs host AdamW: checkpoints differ"
      fi
    ) &
  else
    row skip "dup64 vs the CPU's losses and the device AdamW vs the host's: no GPU (minutes on the emulator)"
  fi
  # Attention on the step's buffers (device projections and 16-bit copies)
  # against the host path on the same GPU, 3 steps each: f32 within 1e-4,
  # fp16 within 1e-2 (as on the emulator), bf16 losses within 2e-3. The
  # rehearsal runs two of them on the emulator. After lowrank_head, data
  # parallelism of the device step with one rank (docs/distributed.md): 2
  # micro-batches per step, their gradients exchanged by device copies and
  # by NCCL (forced; the rehearsal: MPI through host memory), summed in
  # micro-batch order on the device: the same bits either way.
  local attn_cases="lsh_fallback:dup:1e-4 lowrank_head:text:1e-4 dense16:dup:1e-2 lowrank_bf16:text:losses"
  [ "$simulate" = 1 ] && attn_cases="lowrank_head:text:1e-4 lowrank_bf16:text:losses"
  for ac in $attn_cases; do
    (
      IFS=: read -r m kind tol <<<"$ac"
      data=synthetic:duplicate
      [ "$kind" = text ] && data="$t/corpus.txt"
      ok=1
      for path in dev host; do
        flag=()
        [ "$path" = host ] && flag=(--host-attention)
        timeout "$(tleft)" "$rt" train "$t/devattn" --model "$m" --data "$data" --steps 3 --checkpoint-every 3 \
          "${engine[@]}" "${flag[@]}" --out "$dir/devattn-$m-$path" >"$dir/devattn-$m-$path.log" 2>&1 || ok=0
      done
      if [ $ok = 0 ]; then
        line="FAIL attention on the step's buffers, $m: attnc-rt train exited non-zero ($(tail -qn1 "$dir"/devattn-$m-*.log | tr '\n' ' '))"
      elif [ "$tol" = losses ]; then
        line=$(python3 - "$dir/devattn-$m-dev/train.csv" "$dir/devattn-$m-host/train.csv" "$m" <<'PY'
import sys
f = lambda p: [float(l.split(',')[1]) for l in open(p).read().split()[1:]]
a, b = f(sys.argv[1]), f(sys.argv[2])
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(("ok  " if worst < 2e-3 and len(a) == 3 else "FAIL") +
      f" attention on the step's buffers, {sys.argv[3]}: losses within {worst:.1e} of the host path's")
PY
        )
      else
        r=$(python3 "$root/test/train/Inputs/compare_runs.py" "$dir/devattn-$m-dev" "$dir/devattn-$m-host" 3 "$tol" 2>&1)
        verdict="FAIL"
        [[ "$r" == losses\ within* ]] && verdict="ok  "
        line="$verdict attention on the step's buffers, $m vs the host path: $r; $(grep -h "copies in the last step" "$dir/devattn-$m-dev.log" | head -1)"
      fi
      row_line "$line" "attention on the step's buffers, $m"
      [ "$m" = lowrank_head ] || exit 0
      ok=1
      for path in local $exchange; do
        ATTNC_DEVICE_EXCHANGE=$path timeout "$(tleft)" "$rt" train "$t/devattn" --model "$m" --data "$t/corpus.txt" \
          --steps 3 --checkpoint-every 3 --micro-batches 2 "${engine[@]}" --out "$dir/dp-$path" \
          >"$dir/dp-$path.log" 2>&1 || ok=0
      done
      if [ $ok = 0 ]; then
        row FAIL "data parallel on the device ($m, 2 micro-batches): attnc-rt train exited non-zero ($(tail -qn1 "$dir"/dp-*.log | tr '\n' ' '))"
      elif cmp -s "$dir/dp-local/ckpt-3.safetensors" "$dir/dp-$exchange/ckpt-3.safetensors"; then
        row ok "data parallel on the device ($m, 2 micro-batches, 3 steps): $exchange and device copies give bit-identical checkpoints; $(grep -h "^data parallel on the device: " "$dir/dp-$exchange.log" | head -1 | sed 's/^data parallel on the device: //')"
      else
        row FAIL "data parallel on the device ($m): the $exchange exchange's checkpoint differs from the device copies'"
      fi
    ) &
  done
  # README's duplication model with its own train block (300 steps, batch 8).
  if [ "$gpu" = 1 ] && [ "$quick" != 1 ] && [ -d "$t/dup" ]; then
    (
      timeout "$(tleft)" "$rt" train "$t/dup" --data synthetic:duplicate --out "$dir/gpu-dup" >"$dir/gpu-dup.log" 2>&1
      rc=$?
      if [ $rc = 0 ]; then
        acc=$(grep -o "accuracy [0-9.e-]*" "$dir/gpu-dup.log" | tail -1 | awk '{print $2}')
        verdict=$(python3 -c "print('ok  ' if float('${acc:-0}') >= 0.99 else 'FAIL')")
        row_line "$verdict reformer_duplicate on the GPU: held-out accuracy $acc (needs >= 0.99); $(grep -h "tokens/s" "$dir/gpu-dup.log" | tail -1)"
      elif [ $rc = 124 ]; then
        row skip "reformer_duplicate: not finished within the step's budget (no verdict); last: $(tail -1 "$dir/gpu-dup.log")"
      else
        row FAIL "reformer_duplicate: attnc-rt train exited non-zero: $(tail -2 "$dir/gpu-dup.log" | tr '\n' ' ')"
      fi
    ) &
  elif [ "$quick" = 1 ]; then
    row skip "reformer_duplicate (300 steps to >= 99 %): left out in quick mode"
  elif [ "$gpu" != 1 ]; then
    row skip "reformer_duplicate (300 steps to >= 99 %): no GPU"
  fi
  wait
  key "$(grep -c '^ok' "$state/rows-$STEP") ok, $(grep -c '^FAIL' "$state/rows-$STEP") failed, $(grep -c '^skip' "$state/rows-$STEP") skipped"
}

step_7() { # the PyTorch op (scripts/device_torch.py)
  local dir="$res/7-torch" sim=() rc n
  mkdir -p "$dir"
  [ "$have_torch" = 1 ] || { skip_step "no torch in $py"; return 0; }
  [ "$simulate" = 1 ] && sim=(--simulate)
  # The C ABI as the runtime alone builds it loads device-prepare.sh's
  # artifacts (attnc_load); the package is the checkout's.
  LD_LIBRARY_PATH="${rtlibs:+$rtlibs:}${LD_LIBRARY_PATH:-}" ATTNC_LIBRARY="$lib" \
    PYTHONPATH="$root/bindings/python" PYTHONUNBUFFERED=1 timeout "$(tleft)" \
    "$py" "$root/scripts/device_torch.py" "$d/torch" "$d/bench" "$dir/torch.md" "${sim[@]}" >"$dir/torch.log" 2>&1
  rc=$?
  cat "$dir/torch.log"
  if head -1 "$dir/torch.md" 2>/dev/null | grep -q '^(skipped'; then
    skip_step "$(head -1 "$dir/torch.md" | tr -d '()')"
    return 0
  fi
  while IFS= read -r l; do row_line "${l:2}"; done < <(grep -E '^- (ok  |FAIL)' "$dir/torch.md" 2>/dev/null)
  if [ $rc = 124 ]; then
    if grep -q "^Ratios are" "$dir/torch.md" 2>/dev/null; then
      row skip "its timings: cut at the step's budget (the rows done are in the table)"
    else
      row FAIL "scripts/device_torch.py did not finish its checks within the step's budget ($(tail -1 "$dir/torch.log"))"
    fi
  elif [ $rc != 0 ] && ! grep -q '^- FAIL' "$dir/torch.md" 2>/dev/null; then
    row FAIL "scripts/device_torch.py exited $rc: $(tail -1 "$dir/torch.log")"
  fi
  grep -vE '^- (ok  |FAIL)' "$dir/torch.md" >"$dir/tables.md" 2>/dev/null
  attach "$dir/tables.md"
  n=$(grep -cE '^- (ok  |FAIL)' "$dir/torch.md" 2>/dev/null)
  key "$(grep -c '^- ok' "$dir/torch.md" 2>/dev/null) of ${n:-0} checks pass$([ "$simulate" = 1 ] && echo ' (CPU tensors, SIMT emulator)')"
}

step_8() { # the Linformer table and the Reformer sweep
  local dir="$res/8-sweeps" a lin=(1024 2048 4096 8192 16384) tokens=16384 heads=16 repeats=5 shapes=() n
  mkdir -p "$dir"
  [ "$quick" = 1 ] && lin=(1024 2048 4096) tokens=4096 repeats=3
  [ "$simulate" = 1 ] && lin=(128 256) tokens=256 heads=2 repeats=1
  local arts
  arts=$(cd "$d/sweep" && ls -d */ | tr -d /)
  if [ "$simulate" != 1 ]; then # the kernels compiled at once, then timed one by one
    printf '%s\n' $arts | xargs -P "$jobs" -I{} sh -c \
      'timeout '"$(tleft 60)"' "$rt" bench "'"$d"'/sweep/{}" --target cuda --shape 1,2,256 --repeats 1 >/dev/null 2>&1' || true
  fi
  shapes=()
  for n in "${lin[@]}"; do shapes+=(--shape "1,$heads,$n"); done
  for a in dense lowrank_k128 lowrank_k256; do
    grep -qx "$a" <<<"$arts" || continue
    if timeout "$(tleft)" "$rt" bench "$d/sweep/$a" --target "$tgt" "${shapes[@]}" --repeats $repeats \
      --csv "$dir/linformer-$a.csv" >"$dir/linformer-$a.log" 2>&1; then
      row ok "Linformer table: $a at N = $(printf '%s\n' "${lin[@]}" | paste -sd, -)"
    else
      row FAIL "Linformer table: $a: $(tail -1 "$dir/linformer-$a.log")"
    fi
  done
  shapes=()
  for n in "${lin[@]}"; do shapes+=(--shape "$((tokens / n > 0 ? tokens / n : 1)),$heads,$n"); done
  for a in dense lsh; do
    grep -qx "$a" <<<"$arts" || continue
    if timeout "$(tleft)" "$rt" bench "$d/sweep/$a" --target "$tgt" "${shapes[@]}" --repeats $repeats \
      --csv "$dir/lsh-$a.csv" >"$dir/lsh-$a.log" 2>&1; then
      row ok "Reformer sweep: $a, B·N = $tokens"
    else
      row FAIL "Reformer sweep: $a: $(tail -1 "$dir/lsh-$a.log")"
    fi
  done
  python3 "$root/scripts/device_sweeps.py" "$dir" "$dir/sweeps.md" --key="$dir/key.txt" >/dev/null 2>"$dir/sweeps.err" ||
    row FAIL "scripts/device_sweeps.py: $(tail -1 "$dir/sweeps.err")"
  attach "$dir/sweeps.md"
  key "$([ "$simulate" = 1 ] && echo 'SIMT emulator (no figures); ')$(cat "$dir/key.txt" 2>/dev/null)"
}

step_9() { # the Volta (sm_70) kernels as compute_70 PTX, JIT-compiled by the driver
  # Volta's code path (m8n8k4 MMAs, no ldmatrix, synchronous copies, its
  # tiles) on this newer GPU. Its PTX needs a CUDA 12 NVRTC, carried packed.
  local dir="$res/9-volta" names n nbad
  mkdir -p "$dir" "$work/out"
  if [ "$gpu" = 1 ]; then
    if [ ! -f "$d/nvrtc12.tar.xz" ]; then
      skip_step "no CUDA 12 NVRTC carried (device-inputs/nvrtc12.tar.xz): compute_70 PTX needs one"
      return 0
    fi
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
      "$d/nvrtc12.tar.xz" "$work/nvrtc12" || { row FAIL "cannot unpack nvrtc12.tar.xz"; return 1; }
    export ATTNC_NVRTC12="$work/nvrtc12"
  fi
  names=$(case_names volta)
  printf '%s\n' $names | xargs -P "$jobs" -I{} bash -c 'ensure_inputs {}' >"$dir/inputs.txt" 2>&1
  while read -r l; do row_line "$l"; done < <(grep "^FAIL" "$dir/inputs.txt")
  printf '%s\n' $names | xargs -P "$jobs" -I{} bash -c 'run_case {} sm_70' >"$dir/compare.txt" 2>&1
  sort -o "$dir/compare.txt" "$dir/compare.txt"
  cat "$dir/compare.txt"
  case_rows "$dir/compare.txt" $(printf '%s@sm_70\n' $names)
  grep -h "re-tiled" "$dir"/*@sm_70.log 2>/dev/null | sort -u | head -6 >"$dir/retiled.txt"
  if [ -s "$dir/retiled.txt" ]; then
    { echo '```'; cat "$dir/retiled.txt"; echo '```'; } >"$dir/retiled.md"
    attach "$dir/retiled.md"
  fi
  n=$(wc -w <<<"$names")
  nbad=$(grep -h '^FAIL' "$dir/compare.txt" | awk '{print $2}' | tr -d ':' | sort -u | wc -l)
  key "$((n - nbad)) of $n cases pass ($([ "$simulate" = 1 ] && echo "SIMT emulator" || echo "compute_70 PTX"))"
}

#----------------------------------------------------------------------------
# The driver: steps under timeouts, the summary, the three files
#----------------------------------------------------------------------------

status_of() { cat "$state/status-$1" 2>/dev/null || echo "not reached"; }

render_summary() {
  local now n st secs what
  now=$(date +%s)
  echo "# attnc device check"
  echo
  cat "$state/mode"
  echo
  echo "Started $(date -u -d "@$start" '+%F %T UTC'); $((now - start)) s so far. $(cat "$state/verdict" 2>/dev/null ||
    echo "**Unfinished**: a step still running or not reached when this was written (killed, or out of time) has no verdict.")"
  echo
  echo "| step | status | s | budget s | key figure, or why |"
  echo "|---|---|---|---|---|"
  for n in 1 2 3 4 5 6 7 8 9; do
    st=$(status_of $n)
    secs=$(cat "$state/secs-$n" 2>/dev/null || echo -)
    [ "$st" = running ] && secs="$((now - $(cat "$state/t0-$n")))+"
    what=$(cat "$state/skip-$n" "$state/key-$n" 2>/dev/null | head -1)
    echo "| $n. ${titles[$n]} | $st | $secs | $(cat "$state/budget-$n" 2>/dev/null || echo -) | ${what//|/\\|} |"
  done
  for n in 1 2 3 4 5 6 7 8 9; do
    [ -s "$state/rows-$n" ] || [ -s "$state/extra-$n.md" ] || [ -s "$state/skip-$n" ] || continue
    echo
    echo "## $n. ${titles[$n]}: $(status_of $n)"
    echo
    [ -s "$state/skip-$n" ] && echo "Skipped: $(cat "$state/skip-$n")" && echo
    [ -s "$state/rows-$n" ] && sed 's/^/- /' "$state/rows-$n" && echo
    [ -s "$state/extra-$n.md" ] && cat "$state/extra-$n.md"
  done
}

# pack_results FILE: results/ as .tar.xz, without safetensors and shared
# objects; of a file over 8 MiB its last 1 MiB (NAME.tail); at most 16 MiB
# in all (else again with 256 KiB).
pack_results() {
  python3 - "$work" "$1" <<'PY'
import io, os, sys, tarfile
work, dest = sys.argv[1], sys.argv[2]
files = []
for d, dirs, names in os.walk(os.path.join(work, "results")):
    dirs.sort()
    for n in sorted(names):
        p = os.path.join(d, n)
        if not n.endswith((".safetensors", ".so")) and os.path.isfile(p) and not os.path.islink(p):
            files.append(p)
for limit in (8 << 20, 256 << 10):
    left_out = []
    with tarfile.open(dest + ".tmp", "w:xz", preset=3) as t:
        for p in files:
            # Read first, then packed: a file rewritten meanwhile cannot
            # leave a short member behind.
            name = os.path.relpath(p, work)
            try:
                size = os.path.getsize(p)
                with open(p, "rb") as f:
                    if size > limit:
                        left_out.append("%s (%d bytes)" % (name, size))
                        f.seek(size - limit // 8)
                        name += ".tail"
                    data = f.read()
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), int(os.path.getmtime(p))
                t.addfile(info, io.BytesIO(data))
            except OSError:
                pass
        if left_out:
            note = ("Over %d bytes, only their tails (.tail) packed:\n" % limit +
                    "\n".join(left_out) + "\n").encode()
            info = tarfile.TarInfo("results/LEFT-OUT.txt")
            info.size = len(note)
            t.addfile(info, io.BytesIO(note))
    if os.path.getsize(dest + ".tmp") <= (15 << 20):
        break
os.replace(dest + ".tmp", dest)
PY
}

# publish: the three files, each written aside and renamed into $OUT.
publish() {
  (
    ! command -v flock >/dev/null || flock -w 120 9 || exit 0
    p="$state/pub"
    mkdir -p "$p"
    render_summary >"$p/summary.md" 2>/dev/null
    cp "$work/device-check.log" "$p/device-check.log" 2>/dev/null
    pack_results "$p/results.tar.xz" 2>/dev/null
    for f in summary.md device-check.log results.tar.xz; do
      [ -f "$p/$f" ] || continue
      cp "$p/$f" "$out/tmp-$f" && mv -f "$out/tmp-$f" "$out/$f"
    done
  ) 9>"$state/publish.lock"
}

# kill_tree PID: the process and every descendant (the steps' inner
# timeouts run in process groups of their own), children first.
kill_tree() {
  local c
  kill -STOP "$1" 2>/dev/null
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$c"; done
  kill -KILL "$1" 2>/dev/null
}

# run_step N: step N under its budget, cut to the deadline.
run_step() {
  local n=$1 b t now rc st
  now=$(date +%s)
  b=$(budget "$n" "$col")
  if [ -n "$sel" ] && [ "$n" -gt 2 ] && [[ ",$sel," != *",$n,"* ]]; then
    echo skipped >"$state/status-$n"
    echo "not selected (DEVICE_CHECK_STEPS=$sel)" >"$state/skip-$n"
    return
  fi
  t=$((deadline - now - reserve))
  [ "$t" -gt "$b" ] && t=$b
  if [ "$n" = 2 ]; then # it may build: the deadline then takes the time from the last steps
    t=$((deadline - now - reserve))
    [ "$t" -gt 150 ] && t=150
  fi
  if [ "$t" -lt 5 ]; then
    echo skipped >"$state/status-$n"
    echo "no time left ($((now - start)) s of the $total s deadline used)" >"$state/skip-$n"
    return
  fi
  echo
  echo "=== $n. ${titles[$n]} (budget $t s; $((now - start)) s in)"
  echo "$t" >"$state/budget-$n"
  echo "$now" >"$state/t0-$n"
  echo running >"$state/status-$n"
  publish
  local margin=$((t / 4))
  [ "$margin" -gt 6 ] && margin=6
  STEP_DEADLINE=$((now + t - margin)) timeout -k 3 "$t" bash "$self" --step "$n" &
  step_pid=$!
  wait "$step_pid"
  rc=$?
  if [ "$interrupted" = 1 ]; then
    kill_tree "$step_pid"
    wait "$step_pid" 2>/dev/null
    rc=130
  fi
  step_pid=""
  echo $(($(date +%s) - now)) >"$state/secs-$n"
  # shellcheck disable=SC1091
  . "$state/env"
  if [ "$interrupted" = 1 ]; then
    st=interrupted
  elif [ $rc = 124 ] || [ $rc = 137 ]; then
    st="timed out"
    echo "FAIL the step did not finish within its $t s" >>"$state/rows-$n"
  elif grep -q '^FAIL' "$state/rows-$n" 2>/dev/null; then
    st=failed
  elif [ $rc != 0 ]; then
    st=failed
    echo "FAIL the step exited $rc" >>"$state/rows-$n"
  elif [ -s "$state/skip-$n" ] || { ! grep -q '^ok' "$state/rows-$n" 2>/dev/null; }; then
    st=skipped
    [ -s "$state/skip-$n" ] || [ -s "$state/key-$n" ] ||
      grep '^skip' "$state/rows-$n" 2>/dev/null | head -1 | cut -c6- >"$state/skip-$n"
  else
    st=passed
  fi
  echo "$st" >"$state/status-$n"
  echo "--- $n. ${titles[$n]}: $st in $(cat "$state/secs-$n") s"
  publish
}

print_table() {
  local n st
  printf '\n%-36s %-12s %5s  %s\n' "step" "status" "s" "key figure, or why"
  for n in 1 2 3 4 5 6 7 8 9; do
    st=$(status_of $n)
    printf '%-36s %-12s %5s  %s\n' "$n. ${titles[$n]}" "$st" "$(cat "$state/secs-$n" 2>/dev/null || echo -)" \
      "$(cat "$state/skip-$n" "$state/key-$n" 2>/dev/null | head -1 | cut -c1-110)"
  done
  echo "device-check: $(cat "$state/verdict")"
}

main() {
  out="${OUT:-$root/device-out}"
  work="${DEVICE_CHECK_WORK:-$root/device-work}"
  d="${DEVICE_INPUTS:-$root/device-inputs}"
  simulate="${DEVICE_CHECK_SIMULATE:-0}"
  quick="${DEVICE_CHECK_QUICK:-0}"
  sel="${DEVICE_CHECK_STEPS:-}"
  py="${DEVICE_PYTHON:-python3}"
  jobs="${DEVICE_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}"
  col=4
  [ "$quick" = 1 ] && col=5
  [ "$simulate" = 1 ] && col=6
  total=${DEVICE_CHECK_DEADLINE:-$(budget T $col)}
  reserve=$(budget P $col)
  if [ -e "$work" ] && [ ! -f "$work/.device-check-work" ] && [ -n "$(ls -A "$work" 2>/dev/null)" ]; then
    echo "device-check: $work is not empty and not a scratch folder of this script: choose another DEVICE_CHECK_WORK" >&2
    exit 1
  fi
  rm -rf "$work"
  mkdir -p "$work/state" "$work/results" "$work/out" "$out" || exit 1
  touch "$work/.device-check-work"
  d="$(cd "$d" 2>/dev/null && pwd || echo "$d")"
  state="$work/state" res="$work/results"
  : >"$state/env"
  export root self out work state res d simulate quick py jobs
  export ATTNC_CACHE_DIR="${ATTNC_CACHE_DIR:-$root/build-device/kernel-cache}"
  start=$(date +%s)
  deadline=$((start + total))
  interrupted=0 step_pid=""
  {
    if [ "$simulate" = 1 ]; then
      echo "Rehearsal (DEVICE_CHECK_SIMULATE=1): the CUDA kernels on the SIMT emulator at small shapes, no GPU figures; the GPU-only checks are skipped with their reason."
    else
      echo "A run on the GPU$([ "$quick" = 1 ] && echo ", quick mode (DEVICE_CHECK_QUICK=1)")."
    fi
    echo "Steps: ${sel:-all} (1 and 2 always); deadline $total s; $(cat "$d/prepared" 2>/dev/null | sed 's/^/inputs prepared: /'); checkout $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')."
  } >"$state/mode"

  exec > >(tee "$work/device-check.log") 2>&1
  tee_pid=$!
  trap 'interrupted=1; echo "device-check: interrupted"' TERM INT
  main_pid=$$
  pub_pid=""
  if command -v flock >/dev/null; then # without a lock: publish between steps only
    (
      trap - TERM INT
      while sleep 15; do
        kill -0 "$main_pid" 2>/dev/null || exit 0
        publish
      done
    ) </dev/null >/dev/null 2>&1 &
    pub_pid=$!
  fi

  local n code=0
  for n in 1 2 3 4 5 6 7 8 9; do
    run_step $n
    [ "$interrupted" = 1 ] && break
    if [ "$n" = 2 ]; then
      if [ "$(status_of 2)" != passed ]; then
        for m in 3 4 5 6 7 8 9; do
          echo skipped >"$state/status-$m"
          echo "no attnc-rt (step 2 failed)" >"$state/skip-$m"
        done
        break
      fi
      if [ "${gpu:-0}" != 1 ] && [ "$simulate" != 1 ]; then
        for m in 3 4 5 6 7 8 9; do
          echo skipped >"$state/status-$m"
          echo "no GPU: attnc-rt info found none (DEVICE_CHECK_SIMULATE=1 rehearses on the emulator)" >"$state/skip-$m"
        done
        break
      fi
    fi
  done
  [ -n "$pub_pid" ] && kill "$pub_pid" 2>/dev/null && wait "$pub_pid" 2>/dev/null
  local failed
  failed=$(for n in 1 2 3 4 5 6 7 8 9; do st=$(status_of $n); { [ "$st" = failed ] || [ "$st" = "timed out" ]; } &&
    echo "$n"; done | paste -sd, -)
  [ -n "$failed" ] && code=1
  local nogpu=0
  [ "$(status_of 2)" = passed ] && [ "${gpu:-0}" != 1 ] && nogpu=1 code=3
  [ "$interrupted" = 1 ] && code=1
  local what="all run checks passed"
  [ -n "$failed" ] && what="steps $failed failed"
  [ $nogpu = 1 ] && what="no GPU ($([ "$simulate" = 1 ] && echo "rehearsal on the SIMT emulator: " )$([ -n "$failed" ] && echo "steps $failed failed" || echo "no failures"))"
  [ "$interrupted" = 1 ] && what="interrupted; $what"
  echo "**Finished** in $(($(date +%s) - start)) s: $what; exit status $code." >"$state/verdict"
  publish
  print_table
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null
  cp "$work/device-check.log" "$out/tmp-device-check.log" && mv -f "$out/tmp-device-check.log" "$out/device-check.log"
  exit $code
}

if [ "${1:-}" = --step ]; then
  STEP=$2
  # shellcheck disable=SC1091
  . "$state/env"
  "step_$2"
  exit $?
fi
main "$@"
