"""The performance model beside the GPU's timings (scripts/device-check.sh,
step 5; docs/perf-model.md, "Calibration"): reads the CSVs `attnc-rt bench
--csv` wrote into BENCH_DIR (NAME.csv per artifact) and the predictions
scripts/device-prepare.sh made with `attnc perf` for the same artifacts and
shapes (PREDICTED_DIR/NAME.perf-B,H,N.csv, sm_90 with the H100 SXM5's
rates), and writes a Markdown table of each pass's measured and predicted
time and their ratio to OUT_MD.

Usage: device_perf.py BENCH_DIR PREDICTED_DIR OUT_MD [--key=FILE]

--key=FILE writes a one-line summary: the pairs compared and the median
measured/predicted ratio of each pass. Exits 1 when no pair was found.
Standard-library Python only.
"""
import csv
import os
import statistics
import sys


def predicted_passes(path):
    """{'fwd': us, 'bwd': us} of the perf CSV's pass rows."""
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            kind = row.get("kind", "")
            if kind.startswith("pass-") and row.get("predicted_us"):
                out[kind[len("pass-"):]] = float(row["predicted_us"])
    return out


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    bench_dir, predicted_dir, out_md = args
    lines = ["| artifact | B,H,N,D | pass | measured ms | predicted ms | measured / predicted |",
             "|---|---|---|---|---|---|"]
    ratios = {"fwd": [], "bwd": []}
    for name in sorted(os.listdir(bench_dir)):
        if not name.endswith(".csv") or ".perf-" in name:
            continue
        art = name[:-len(".csv")]
        with open(os.path.join(bench_dir, name), newline="") as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            shape = f"{r['B']},{r['H']},{r['N']}"
            perf = os.path.join(predicted_dir, f"{art}.perf-{shape}.csv")
            if not os.path.exists(perf):
                lines.append(f"| {art} | {shape},{r['D']} | - | - | - | no prediction ({os.path.basename(perf)} missing) |")
                continue
            passes = predicted_passes(perf)
            for p, col in (("fwd", "fwd_ms"), ("bwd", "bwd_ms")):
                measured = float(r[col]) if r.get(col) not in (None, "", "0") else 0.0
                if p not in passes or measured <= 0:
                    continue
                pred = passes[p] / 1000.0
                ratio = measured / pred
                ratios[p].append(ratio)
                lines.append(f"| {art} | {shape},{r['D']} | {p} | {measured:.3f} | {pred:.3f} | {ratio:.2f} |")
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    pairs = len(ratios["fwd"]) + len(ratios["bwd"])
    summary = f"{pairs} pass timings beside the model" + "".join(
        f"; {p} measured/predicted median {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
        for p, v in ratios.items() if v)
    if "key" in opts:
        with open(opts["key"], "w") as f:
            f.write(summary + "\n")
    print(summary)
    return 0 if pairs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
