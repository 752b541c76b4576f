#!/usr/bin/env bash
# The device check rehearsed without a GPU (scripts/test.sh runs it after the
# runtime-only build): device-prepare.sh's tiny set into a temporary
# device-inputs (the runtime-only attnc-rt and libattnc.so carried as on the
# real run), then device-check.sh with DEVICE_CHECK_SIMULATE=1 (the SIMT
# emulator; the GPU-only checks skipped with their reason), and asserts the
# device tool's rules on $OUT (scripts/device_rules.py): at most 8 files, two
# folders down, allowed names, 16 MiB each, results.tar.xz opens, a summary
# row for every step 1-9, and no step failed. Then it runs steps 3 and 6
# again (DEVICE_CHECK_STEPS) and kills the whole run with SIGKILL as soon as
# step 6 has begun: $OUT must still obey the rules and hold the verdicts of
# the steps before.
# Last, the size of what would travel (scripts/device_size.py), and that
# an oversized set is refused with its largest items named.
#
# Environment: DEVICE_PYTHON (a Python with torch runs step 7 on the
# emulator; without torch the step is skipped), DEVICE_PREPARE_RUNTIME (the
# runtime-only build, default build-runtime-only), ATTNC_CACHE_DIR (the
# kernel cache: default a fresh one, so the measured time is a cold run's).
# Exits 0 when every assertion holds, 1 otherwise.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/attnc-rehearsal.XXXXXX")"
sid=""
cleanup() {
  # The killed run's processes, by the session it was started in.
  [ -n "$sid" ] && for p in $(ps -o pid= --sid "$sid" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  [ "${DEVICE_REHEARSAL_KEEP:-0}" = 1 ] && echo "device-rehearsal: kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
t0=$(date +%s)
say() { echo "device-rehearsal: $* ($(($(date +%s) - t0)) s)"; }
export ATTNC_CACHE_DIR="${ATTNC_CACHE_DIR:-$tmp/cache}"
inputs="$tmp/device-inputs"

if ! DEVICE_PREPARE_NO_BUILD=1 DEVICE_PREPARE_TINY=1 DEVICE_INPUTS="$inputs" \
  bash "$root/scripts/device-prepare.sh" >"$tmp/prepare.log" 2>&1; then
  cat "$tmp/prepare.log"
  say "FAIL device-prepare.sh (tiny)"
  exit 1
fi
say "prepared: $(grep 'device-size:' "$tmp/prepare.log")"

# 1. The whole rehearsal: exit 3 (no GPU), the rules, every step passed or skipped.
OUT="$tmp/out" DEVICE_CHECK_WORK="$tmp/work" DEVICE_CHECK_SIMULATE=1 DEVICE_INPUTS="$inputs" \
  bash "$root/scripts/device-check.sh" >"$tmp/check.log" 2>&1
rc=$?
tail -12 "$tmp/check.log"
[ $rc = 3 ] || { say "FAIL device-check.sh exited $rc, not 3 (no GPU)"; fail=1; }
python3 "$root/scripts/device_rules.py" "$tmp/out" --final all --ok all || fail=1
for f in summary.md device-check.log results.tar.xz; do
  [ -s "$tmp/out/$f" ] || { say "FAIL no $f in \$OUT"; fail=1; }
done
grep -q "^| 4\. .*| skipped |.*no GPU" "$tmp/out/summary.md" ||
  { say "FAIL step 4 (GPU only) is not skipped with its reason"; fail=1; }
say "rehearsal: exit $rc"

# 2. Killed as soon as step 6 has begun (SIGKILL to every process of the
# run, as the tool's limit would): what is in $OUT still obeys the rules
# and holds the verdicts of steps 1-5 (4 and 5 not selected).
OUT="$tmp/out-killed" DEVICE_CHECK_WORK="$tmp/work-killed" DEVICE_CHECK_SIMULATE=1 DEVICE_INPUTS="$inputs" \
  DEVICE_CHECK_STEPS=3,6 setsid bash "$root/scripts/device-check.sh" >"$tmp/check-killed.log" 2>&1 &
pid=$!
for _ in $(seq 1 50); do # until setsid has made the session
  sid=$(ps -o sid= -p "$pid" | tr -d ' ')
  [ "$sid" = "$pid" ] && break
  sleep 0.1
done
[ "$sid" = "$pid" ] || { say "FAIL the killed run did not start a session of its own (${sid:-gone})"; sid=""; kill -KILL "$pid"; exit 1; }
for _ in $(seq 1 1500); do
  grep -q "^| 6\. .*| running |" "$tmp/out-killed/summary.md" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
for p in $(ps -o pid= --sid "$sid"); do kill -KILL "$p" 2>/dev/null; done
wait "$pid" 2>/dev/null
sid=""
say "killed during step 6"
python3 "$root/scripts/device_rules.py" "$tmp/out-killed" --final 1,2,3,4,5 --ok 1,2,3 --running 6 || fail=1

# 3. The budgets in device-check.sh's header add up: full within 480 s, quick within 240.
awk '$1 == "#@" && $2 ~ /^[1-9P]$/ { f += $4; q += $5; s += $6 } $1 == "#@" && $2 == "T" { t = $4; tq = $5; ts = $6 }
  END { if (f != t || q != tq || s != ts || t > 480 || tq > 240) {
          printf "device-rehearsal: FAIL budgets: full %d (total %d), quick %d (%d), sim %d (%d)\n", f, t, q, tq, s, ts; exit 1 } }' \
  "$root/scripts/device-check.sh" || fail=1

# 4. What travels: the tiny set fits; an oversized one is refused, naming its largest items.
python3 "$root/scripts/device_size.py" --root "$root" --carry "$inputs" || fail=1
if python3 "$root/scripts/device_size.py" --root "$root" --carry "$inputs" --limit-mib 0.01 >"$tmp/size.txt"; then
  say "FAIL device_size.py passed a set over its limit"
  fail=1
elif [ "$(grep -c ' MiB  ' "$tmp/size.txt")" != 10 ]; then
  cat "$tmp/size.txt"
  say "FAIL device_size.py over its limit did not name ten items"
  fail=1
fi

if [ $fail = 0 ]; then
  say "passed"
else
  echo "--- the rehearsal's summary.md:"
  cat "$tmp/out/summary.md" 2>/dev/null
  say "FAILED"
fi
exit $fail
