"""Checks the accuracy measurements attnc tune --max-error recorded: every
candidate has a finite relative error, and for LSH the error falls as the
rounds grow at each chunk size."""
import json
import math
import sys

db = json.load(open(sys.argv[1]))
lsh = {}
seen = 0
for e in db["entries"]:
    if not e["kernel"]["signature"].startswith("cpu accuracy"):
        continue
    for m in e["measured"]:
        assert not m["error"], m
        err = m["rel_error"]
        assert math.isfinite(err) and err >= 0, m
        seen += 1
        if " lsh " in e["kernel"]["signature"]:
            cfg = dict(kv.split("=") for kv in m["config"].split(","))
            lsh.setdefault(int(cfg["chunk"]), {})[int(cfg["rounds"])] = err
assert seen >= 6, f"only {seen} accuracy measurements"
assert lsh, "no LSH measurements"
for chunk, by_rounds in lsh.items():
    errs = [by_rounds[r] for r in sorted(by_rounds)]
    assert all(a > b for a, b in zip(errs, errs[1:])), (chunk, by_rounds)
print(f"ok: {seen} measurements; LSH errors by chunk and rounds {lsh}")
