#!/usr/bin/env bash
# The main job, for now: build attnc, compile every example spec, and show
# what the compiler makes of them (the attn IR, and the tunables it resolves).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh" "$root/build" >/dev/null
attnc="$root/build/bin/attnc"

for spec in "$root"/examples/*.attn; do
  echo "=== $(basename "$spec")"
  "$attnc" compile "$spec"
done
echo
echo "=== attnc compile examples/alibi_window.attn --emit=mlir"
"$attnc" compile "$root/examples/alibi_window.attn" --emit=mlir
echo
echo "=== attnc compile examples/reformer_lm.attn --emit=lowered (heuristic choices as remarks)"
"$attnc" compile "$root/examples/reformer_lm.attn" --emit=lowered
