#!/usr/bin/env python3
"""The Linformer table and the Reformer sweep from attnc-rt bench CSVs
(scripts/device-check.sh, step 5), as markdown.

Usage: device_sweeps.py DIR OUT.md [--key=FILE]

DIR holds linformer-dense.csv, linformer-lowrank_k128.csv,
linformer-lowrank_k256.csv (B = 1, N growing) and lsh-dense.csv,
lsh-lsh.csv (B·N fixed). Times are the kernels' own (CUDA events, the
median of the repeats), forward and forward + backward; low-rank times
include the projections E·K and F·V on the device. "time saved" is
dense / low-rank, the Linformer paper's Table 3 measure for one attention
op (the paper's is whole-model inference on a V100). --key=FILE writes
a one-line summary: both measures at the longest sequence.
"""
import csv
import os
import sys


def rows(path):
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {(int(r["B"]), int(r["N"])): r for r in csv.DictReader(f)}


def ms(r, both):
    return float(r["fwd_ms"]) + (float(r["bwd_ms"]) if both else 0.0)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    keys = [a[len("--key="):] for a in sys.argv[1:] if a.startswith("--key=")]
    d, out = args[0], args[1]
    lines, summary = [], []
    dense = rows(os.path.join(d, "linformer-dense.csv"))
    low = {k: rows(os.path.join(d, "linformer-lowrank_k%d.csv" % k)) for k in (128, 256)}
    heads = next(iter(dense.values()))["H"] if dense else "?"
    lines += ["### Linformer table: one attention op, fp16, B = 1, H = %s, D = 64" % heads, "",
              "| N | dense fwd ms | k=128 fwd ms | time saved | k=256 fwd ms | time saved "
              "| dense fwd+bwd ms | k=128 fwd+bwd | saved | k=256 fwd+bwd | saved |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(dense):
        cells = ["%d" % key[1], "%.3f" % ms(dense[key], False)]
        for both in (False, True):
            if both:
                cells.append("%.3f" % ms(dense[key], True))
            for k in (128, 256):
                r = low[k].get(key)
                if r is None or k >= key[1]:
                    cells += ["-", "-"]
                    continue
                t = ms(r, both)
                cells += ["%.3f" % t, "%.2fx" % (ms(dense[key], both) / t) if t > 0 else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    if dense:
        top = max(dense)
        r = low[128].get(top)
        if r is not None and 128 < top[1] and ms(r, False) > 0:
            summary.append("Linformer N=%d: k=128 saves %.2fx fwd" % (
                top[1], ms(dense[top], False) / ms(r, False)))
    if not dense:
        lines.append("(no dense timings)")
    dd, ll = rows(os.path.join(d, "lsh-dense.csv")), rows(os.path.join(d, "lsh-lsh.csv"))
    heads = next(iter(dd.values()))["H"] if dd else "?"
    lines += ["", "### Reformer sweep: B·N fixed, fp16, H = %s, D = 64 (ms per 1k tokens, "
              "forward + backward)" % heads, "",
              "| B | N | dense | LSH | LSH / dense |", "|---|---|---|---|---|"]
    for key in sorted(dd, key=lambda k: k[1]):
        tokens = key[0] * key[1] / 1000.0
        a = ms(dd[key], True) / tokens
        r = ll.get(key)
        b = ms(r, True) / tokens if r else None
        lines.append("| %d | %d | %.4f | %s | %s |" % (
            key[0], key[1], a, "%.4f" % b if b is not None else "-",
            "%.2f" % (b / a) if b is not None and a > 0 else "-"))
    if not dd:
        lines.append("(no dense timings)")
    top = max(ll, key=lambda k: k[1]) if ll else None
    if top and top in dd and ms(dd[top], True) > 0:
        summary.append("Reformer N=%d: LSH/dense per token %.2f" % (
            top[1], ms(ll[top], True) / ms(dd[top], True)))
    for k in keys:
        with open(k, "w") as f:
            f.write("; ".join(summary) + "\n")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
