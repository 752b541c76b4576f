"""Feeds malformed specs to `attnc compile` and checks each gets a located
error (`FILE:LINE:COL: error: ...`), exit code 1, no crash and no hang.

Usage: check_bad_inputs.py ATTNC WORKDIR CORPUS_DIR
Generated cases (not committed, some are large): empty, whitespace, binary
garbage, NUL bytes, invalid UTF-8, a 10 MB spec with an error at its end, a
10 MB single line, 100k nested parentheses, long operator and unary chains.
"""
import os
import random
import re
import subprocess
import sys
import time

attnc, work, corpus = sys.argv[1:4]
os.makedirs(work, exist_ok=True)

valid = "attention a%d { kv lowrank(k = 64, share = kv) mask padding }\n"
cases = {
    "empty.attn": b"",
    "whitespace.attn": b"  \n\t\n   ",
    "nul-bytes.attn": b"attention a {\x00\x00}",
    "invalid-utf8.attn": b"attention \xff\xfe { }",
    "utf8-identifier.attn": "attention caf\u00e9 { }".encode(),
    "only-closing.attn": b"}}}}",
    "nested-parens.attn": b"attention a { score " + b"(" * 100000 + b"s" + b")" * 100000 + b" }",
    "unary-chain.attn": b"attention a { score " + b"-" * 100000 + b"s }",
    "not-chain.attn": b"attention a { mask " + b"!" * 100000 + b"true }",
    "plus-chain.attn": b"attention a { score s" + b" + 1" * 200000 + b" }",
    "ten-mb-line.attn": b"attention a { score " + b"s+" * (5 << 20),
    "ten-mb-spec.attn": b"".join((valid % i).encode() for i in range(180000)) + b"attention broken { kv lowrank(k = ) }\n",
    "deep-braces.attn": b"{" * 1000000,
    "long-identifier.attn": b"attention " + b"x" * 1000000 + b" { }",
    "long-number.attn": b"attention a { scale " + b"9" * 1000000 + b" }",
}
rng = random.Random(1234)
for i in range(8):
    cases["garbage-%d.attn" % i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096)))

paths = []
for name, data in cases.items():
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        f.write(data)
    paths.append(path)
for name in sorted(os.listdir(corpus)):
    paths.append(os.path.join(corpus, name))

failures = 0
for path in paths:
    start = time.time()
    try:
        r = subprocess.run([attnc, "compile", path, "--emit=mlir"], capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        print("FAIL (hang > 60 s):", path)
        failures += 1
        continue
    took = time.time() - start
    err = r.stderr.decode("utf-8", "replace")
    first = err.splitlines()[0] if err else ""
    located = re.match(re.escape(path) + r":\d+:\d+: error: ", first)
    if r.returncode != 1 or not located or "Stack dump" in err or len(err) > 100000:
        print("FAIL:", path, "exit", r.returncode, "stderr:", err[:500])
        failures += 1
    else:
        print("ok %-28s %5.2fs  %s" % (os.path.basename(path), took, first[len(path):][:90]))
print("%d bad inputs, %d failures" % (len(paths), failures))
sys.exit(1 if failures else 0)
