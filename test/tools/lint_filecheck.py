"""Fails if any test file holds a misspelled FileCheck or lit directive."""
import os
import re
import sys

root = sys.argv[1]
known = {"CHECK", "CHECK-NEXT", "CHECK-SAME", "CHECK-NOT", "CHECK-LABEL", "CHECK-DAG",
         "CHECK-EMPTY", "CHECK-COUNT", "RUN", "REQUIRES", "UNSUPPORTED", "XFAIL"}
prefixes = set()
directive = re.compile(r"(?://|#|;)\s*([A-Za-z][A-Za-z0-9_-]*)\s*:")
prefix_flag = re.compile(r"--check-prefix(?:es)?[= ]([A-Z0-9_,-]+)")
bad = []


def distance(a, b):
    """Levenshtein distance, small strings only."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


for dirpath, _, files in os.walk(root):
    for name in files:
        if not name.endswith((".attn", ".mlir", ".test")):
            continue
        path = os.path.join(dirpath, name)
        text = open(path, encoding="utf-8", errors="replace").read()
        local = set(p for m in prefix_flag.finditer(text) for p in m.group(1).split(","))
        allowed = set(known)
        for p in local:
            allowed |= {p, p + "-NEXT", p + "-SAME", p + "-NOT", p + "-LABEL", p + "-DAG",
                        p + "-EMPTY"}
        for lineno, line in enumerate(text.splitlines(), 1):
            m = directive.search(line)
            if not m:
                continue
            word = m.group(1)
            if word in allowed or word.startswith("CHECK-COUNT-"):
                continue
            # A near miss of a known directive, or anything spelled like CHECK.
            near = min(distance(word.upper(), a) for a in allowed) <= 2
            if near or re.search(r"(?i)ch?e?c?k", word):
                bad.append("%s:%d: unknown directive '%s:'" % (path, lineno, word))
for b in bad:
    print(b)
print("%d misspelled directive(s)" % len(bad))
sys.exit(1 if bad else 0)
