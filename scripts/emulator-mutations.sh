#!/usr/bin/env bash
# Mutation test of the emulator tests (docs/emulator.md): removes each
# __syncthreads() and each cp.async wait (cpAsyncWait<N>()) of the CUDA
# kernel headers, one at a time, from a copy of kernels/cuda/attnc,
# rebuilds the emulator tests that include that header against the copy,
# runs them, and reports which removals they catch ("caught X of Y" and a
# table of sites). Slow (a rebuild and a run per site, a minute or two
# each): run by hand, not in CI.
#
# Usage: scripts/emulator-mutations.sh [-j JOBS] [-B BUILD_DIR] [-o REPORT]
#                                      [--only REGEX] [--with-slow]
#   -j JOBS       mutants built and run at once (default 1)
#   -B BUILD_DIR  a configured build of this tree (default build/); its
#                 compile commands and link lines are reused
#   -o REPORT     also write the table (markdown) there
#   --only REGEX  only the sites whose "file:line" matches REGEX
#   --with-slow   also run the 70,000-block ManySlices cases
#
# A site counts as caught when a test fails, crashes or times out (900 s).
# Test binaries that do not loop over schedules themselves (model step,
# optimizer) run under ATTNC_EMU_SCHEDULE=index, reverse and random:1.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
jobs=1
report=""
only=""
slow=0
while [ $# -gt 0 ]; do
  case "$1" in
  -j) jobs="$2"; shift 2 ;;
  -B) build="$(cd "$2" && pwd)"; shift 2 ;;
  -o) report="$2"; shift 2 ;;
  --only) only="$2"; shift 2 ;;
  --with-slow) slow=1; shift ;;
  -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
  *) echo "emulator-mutations: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -f "$build/compile_commands.json" ] || {
  echo "emulator-mutations: $build has no compile_commands.json (configure a build first)" >&2
  exit 2
}

work="$(mktemp -d /tmp/attnc-mutations.XXXXXX)"
echo "emulator-mutations: working in $work"
mkdir -p "$work/base"
cp -r "$root/kernels/cuda/attnc" "$work/base/attnc"

# The test binaries (their other objects and libraries are linked as built).
targets="attnc-cuda-kernel-tests attnc-cuda-lsh-tests attnc-cuda-model-step-tests attnc-cuda-optimizer-tests attnc-device-support-tests"
echo "emulator-mutations: building $targets"
ninja -C "$build" $targets >/dev/null

# family -> test source, target, gtest filter, whether the tests loop over
# schedules themselves.
skip='-*ManySlices*'
[ "$slow" = 1 ] && skip=''
declare -A src target filter loops
src[dense]=test/unit/kernels/CudaKernelsTest.cpp; target[dense]=attnc-cuda-kernel-tests
filter[dense]="CudaKernelsEmulated.*:CudaLowRankEmulated.*:CudaEmulator.*$skip"; loops[dense]=1
src[lsh]=test/unit/kernels/CudaLshTest.cpp; target[lsh]=attnc-cuda-lsh-tests
filter[lsh]="CudaLshEmulated.*$skip"; loops[lsh]=1
src[step]=test/unit/runtime/train/CudaModelStepTest.cpp; target[step]=attnc-cuda-model-step-tests
filter[step]="CudaModelStep*"; loops[step]=0
src[opt]=test/unit/runtime/train/CudaOptimizerTest.cpp; target[opt]=attnc-cuda-optimizer-tests
filter[opt]="CudaOptimizerEmu*"; loops[opt]=0
src[support]=test/unit/kernels/DeviceSupportTest.cpp; target[support]=attnc-device-support-tests
filter[support]="DeviceSupportEmu.*"; loops[support]=1

# The families whose tests include a header.
families_of() {
  case "$1" in
  lsh*) echo lsh ;;
  model_step.cuh) echo step ;;
  device_support.cuh) echo support ;;
  optimizer.cuh) echo "opt step" ;; # model_step.cuh includes optimizer.cuh
  *) echo dense ;;
  esac
}

# Compile and link lines of each family, with the kernel include directory,
# the object and the executable as placeholders.
for fam in dense lsh step opt support; do
  python3 - "$build" "$root/${src[$fam]}" "$root/kernels/cuda" >"$work/$fam.compile" <<'PY'
import json, sys
build, source, kernels = sys.argv[1:]
for e in json.load(open(build + '/compile_commands.json')):
    if e['file'] == source:
        cmd = e['command']
        cmd = cmd.replace('-I' + kernels + ' ', '-I@KERNELS@ ')
        args = cmd.split(' ')
        i = args.index('-o')
        args[i + 1] = '@OBJECT@'
        print('cd ' + e['directory'] + ' && ' + ' '.join(args))
        break
else:
    sys.exit('no compile command for ' + source)
PY
  grep -q '@KERNELS@' "$work/$fam.compile" || {
    echo "emulator-mutations: ${src[$fam]} is not compiled with -I$root/kernels/cuda" >&2
    exit 2
  }
  link="$(ninja -C "$build" -t commands "${target[$fam]}" | tail -1)"
  # The test's own object in the link line, and the executable.
  testobj="$(echo "$link" | grep -o "[^ ]*$(basename "${src[$fam]}").o" | head -1)"
  [ -n "$testobj" ] || { echo "emulator-mutations: no object of ${src[$fam]} in the link line" >&2; exit 2; }
  echo "cd $build && ${link//$testobj/@OBJECT@}" | sed -E "s| -o [^ ]+| -o @EXE@|" >"$work/$fam.link"
done

# Builds family $2 against kernel directory $1 into $3; 0 on success.
build_family() {
  local kernels="$1" fam="$2" out="$3"
  local c l
  c="$(sed -e "s|@KERNELS@|$kernels|" -e "s|@OBJECT@|$out.o|" "$work/$fam.compile")"
  l="$(sed -e "s|@OBJECT@|$out.o|" -e "s|@EXE@|$out|" "$work/$fam.link")"
  (eval "$c") >"$out.build.log" 2>&1 && (eval "$l") >>"$out.build.log" 2>&1
}

# Runs family $1's tests in $2; prints "caught <test> <message>" or "passed".
run_family() {
  local fam="$1" exe="$2" log="$2.run.log" scheds="-" rc s
  [ "${loops[$fam]}" = 0 ] && scheds="index reverse random:1"
  : >"$log"
  for s in $scheds; do
    rc=0
    if [ "$s" = "-" ]; then
      timeout 900 "$exe" --gtest_filter="${filter[$fam]}" --gtest_fail_fast >>"$log" 2>&1 || rc=$?
    else
      ATTNC_EMU_SCHEDULE=$s timeout 900 "$exe" --gtest_filter="${filter[$fam]}" \
        --gtest_fail_fast >>"$log" 2>&1 || rc=$?
    fi
    if [ "$rc" != 0 ]; then
      local test msg
      test="$(grep -m1 -oE '^\[  FAILED  \] [^ ]+' "$log" | awk '{print $4}' || true)"
      # The emulator's message, else the first gtest failure, on one line.
      msg="$(grep -m1 -E '^emu \(' "$log" || true)"
      [ -z "$msg" ] && msg="$(awk '/: Failure$/ {if (f) exit; f = 1; next}
        f && (/^\[/ || /^Google Test trace/ || /^  (schedule|[a-z]+ +max)/ || /^$/) {exit}
        f {sub(/^ +/, ""); out = out (out ? " " : "") $0} END {print out}' "$log")"
      msg="$(echo "$msg" | cut -c1-200)"
      [ "$rc" = 124 ] && msg="timeout"
      [ -z "$test" ] && test="(crash, exit $rc)"
      [ "$s" != "-" ] && test="$test [ATTNC_EMU_SCHEDULE=$s]"
      echo "caught $test ${msg:-}"
      return
    fi
  done
  echo "passed"
}

# The unmutated copy must pass, or the score means nothing.
echo "emulator-mutations: baseline (no mutation)"
mkdir -p "$work/baseline"
for fam in dense lsh step opt support; do
  build_family "$work/base" "$fam" "$work/baseline/$fam" || {
    echo "emulator-mutations: baseline build of $fam failed, see $work/baseline/$fam.build.log" >&2
    exit 1
  }
  r="$(run_family "$fam" "$work/baseline/$fam")"
  [ "$r" = passed ] || { echo "emulator-mutations: baseline $fam fails: $r" >&2; exit 1; }
done

# The sites: every __syncthreads() and cpAsyncWait<N>() call that is code
# (not a comment line, not the definitions in copy.cuh).
sites="$work/sites"
(cd "$work/base/attnc" &&
  grep -nE '__syncthreads\(\)|cpAsyncWait<[^>]*>\(\)' *.cuh | grep -vE '^[^:]+:[0-9]+:\s*//' |
  awk -F: '{print $1 ":" $2}') >"$sites"
if [ -n "$only" ]; then
  grep -E "$only" "$sites" >"$sites.only" || true
  mv "$sites.only" "$sites"
fi
total="$(wc -l <"$sites")"
echo "emulator-mutations: $total sites"

# One mutant: copy, remove the call at file:line, build and run the families.
mutate() {
  local site="$1" file="${1%%:*}" line="${1##*:}"
  local dir="$work/m-${file%.cuh}-$line"
  mkdir -p "$dir"
  cp -r "$work/base/attnc" "$dir/attnc"
  local code
  code="$(sed -n "${line}p" "$dir/attnc/$file" | sed -E 's/^\s+//; s/\s*\/\/.*$//')"
  sed -E -i "${line}s/__syncthreads\(\)|cpAsyncWait<[^>]*>\(\)/(void)0/" "$dir/attnc/$file"
  local result="passed" fam r
  for fam in $(families_of "$file"); do
    if ! build_family "$dir" "$fam" "$dir/$fam"; then
      result="caught (build failed, $dir/$fam.build.log)"
      break
    fi
    r="$(run_family "$fam" "$dir/$fam")"
    if [ "$r" != passed ]; then
      result="$r"
      break
    fi
  done
  printf '%s\t%s\t%s\n' "$site" "$code" "$result" >"$dir/result"
  printf '  %-22s %-28s %s\n' "$site" "$code" "${result:0:110}"
  rm -f "$dir"/*.o "$dir/dense" "$dir/lsh" "$dir/step" "$dir/opt" "$dir/support"
}
export -f mutate build_family run_family families_of
export work
# Associative arrays do not cross into xargs' shells: pass them as text.
declare -p filter loops >"$work/arrays.sh"
export BASH_ENV="$work/arrays.sh"

echo "emulator-mutations: running $total mutants, $jobs at a time"
xargs -P "$jobs" -I{} bash -c 'mutate "$@"' _ {} <"$sites"

# The report.
caught=0
table="$work/report.md"
{
  echo "| site | removed | caught | by |"
  echo "|---|---|---|---|"
  while read -r site; do
    file="${site%%:*}"
    line="${site##*:}"
    IFS=$'\t' read -r _ code result <"$work/m-${file%.cuh}-$line/result"
    if [ "$result" = passed ]; then
      echo "| $site | \`$code\` | **no** | |"
    else
      caught=$((caught + 1))
      by="${result#caught }"
      echo "| $site | \`$code\` | yes | ${by//|/\\|} |"
    fi
  done <"$sites"
} >"$table"
echo
cat "$table"
echo
echo "caught $caught of $total"
if [ -n "$report" ]; then
  { echo "caught $caught of $total"; echo; cat "$table"; } >"$report"
  echo "emulator-mutations: report written to $report"
fi
