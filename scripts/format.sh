#!/usr/bin/env bash
# clang-format over the project's C++ sources (.clang-format: LLVM style at
# 100 columns, includes kept in their written order).
# Usage: scripts/format.sh          check: list the files that differ, exit 1 if any
#        scripts/format.sh --fix    rewrite them in place
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
fmt="${CLANG_FORMAT:-clang-format}"
command -v "$fmt" >/dev/null || { echo "format: $fmt not found (apt-get install clang-format)" >&2; exit 1; }
# Tracked files and new ones git does not ignore (a file is formatted before
# its first commit).
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.h' '*.cuh' | grep -v '^test/fuzz/corpus/')
if [ "${1:-}" = "--fix" ]; then
  "$fmt" -i --style=file "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$fmt" --style=file "$f" | cmp -s - "$f"; then
    echo "format: $f differs from clang-format (scripts/format.sh --fix)"
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "format: ${#files[@]} files formatted"
exit "$bad"
