#!/usr/bin/env bash
# Runs every command of README.md's "Then use the compiler directly" block,
# as written, in order, in a scratch folder where build/ and examples/ are
# the checkout's, so that none can fail as written again (scripts/test.sh
# calls it). A command passes when it exits 0, or when it is still running
# at the cap (README_CAP seconds, default 40; long trainings and benchmarks
# are then stopped with SIGTERM, which a training run answers with a
# checkpoint, so the commands after it have a run to evaluate). Two are
# not run here, and say so: `pip install .` (scripts/test.sh installs the
# package exactly so before pytest) and `cmake --install` runs with its
# prefix moved into the scratch folder. attnc tune writes a scratch tuning
# database (ATTNC_TUNING_DB).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cap="${README_CAP:-40}"
work="$(mktemp -d "${TMPDIR:-/tmp}/attnc-readme.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ln -s "$root/build" "$work/build"
# attnc tune writes here, not into the user's own tuning database.
export ATTNC_TUNING_DB="$work/tuning-db.json"
ln -s "$root/examples" "$work/examples"

# The block's commands: continuation lines joined ("\" or a trailing "|").
mapfile -t commands < <(python3 - "$root/README.md" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
start = text.index("Then use the compiler directly")
block = text[text.index("```sh", start) + 5:]
block = block[:block.index("```")]
out, cur = [], ""
for line in block.splitlines():
    if not line.strip():
        continue
    cur += (" " if cur else "") + line.strip()
    if cur.endswith("\\"):
        cur = cur[:-1].rstrip()
        continue
    if re.search(r"\|\s*$", re.sub(r"\s+#.*$", "", cur)):
        continue
    out.append(cur)
    cur = ""
print("\n".join(out))
PY
)
[ "${#commands[@]}" -gt 10 ] || { echo "readme-commands: found only ${#commands[@]} commands" >&2; exit 1; }

failed=0 skipped=0
cd "$work"
for cmd in "${commands[@]}"; do
  case "$cmd" in
    "pip install ."*)
      echo "skip (scripts/test.sh runs it before pytest): $cmd"
      skipped=$((skipped + 1))
      continue
      ;;
    "cmake --install"*) cmd="${cmd/--prefix \/opt\/attnc/--prefix $work/prefix}" ;;
  esac
  start=$(date +%s)
  timeout --signal=TERM --kill-after=30 "$cap" bash -c "$cmd" >"$work/out.txt" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then
    echo "ok ${took} s: $cmd"
  elif [ "$rc" -eq 124 ] || { [ "$took" -ge "$cap" ] && [ "$rc" -ge 128 ]; }; then
    echo "running at the ${cap} s cap (stopped): $cmd"
  else
    echo "FAILED (exit $rc after ${took} s): $cmd"
    tail -n 15 "$work/out.txt" | sed 's/^/    /'
    failed=$((failed + 1))
  fi
done
if [ "$failed" -gt 0 ]; then
  echo "readme-commands: $failed of ${#commands[@]} README commands failed" >&2
  exit 1
fi
echo "readme-commands: $((${#commands[@]} - skipped)) of ${#commands[@]} README commands ran" \
  "(skipped: $skipped, run elsewhere)"
