#!/usr/bin/env bash
# Writes docs/passes.md, the pass reference, from passes/Passes.td
# (mlir-tblgen -gen-pass-doc); test/tools/pass-doc.test fails when the
# committed file differs from what this writes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tblgen="${MLIR_TBLGEN:-/usr/lib/llvm-19/bin/mlir-tblgen}"
{
  echo "# Pass reference"
  echo
  echo "Generated from \`passes/Passes.td\` by \`scripts/pass-doc.sh\`; every pass"
  echo "runs alone in \`attnc-opt\` (\`attnc-opt --PASS[=options] file.mlir\`), and"
  echo "\`passes/Pipelines.h\` groups them into the three named pipelines."
  echo
  "$tblgen" -gen-pass-doc "$root/passes/Passes.td" -I /usr/lib/llvm-19/include -I "$root"
} >"${1:-$root/docs/passes.md}"
