"""Checks the numbers of an attnc --linformer-table CSV that cannot be faked
by formatting: positive times, plan checks within [0.5, 2], skipped cells
for k > N, the paper column, and (with a small --memory-gib) that the
unfused standard model's max batch is below the Linformer one at N=128."""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
assert rows, "no rows"
bad = []
for r in rows:
    n, k = int(r["n"]), int(r["k"])
    skipped = k > n
    for model in ("unfused", "fused", "linformer"):
        check = r["plan_check_" + model]
        if model == "linformer" and skipped:
            if check != "-" or r["ms_linformer"] != "-":
                bad.append(f"N={n} k={k}: k > N must be skipped")
            continue
        if not 0.5 <= float(check) <= 2.0:
            bad.append(f"N={n} k={k}: plan check of {model} is {check}")
    for col in ("ms_std_unfused", "ms_std_fused") + (() if skipped else ("ms_linformer",)):
        if not float(r[col]) > 0:
            bad.append(f"N={n} k={k}: {col} = {r[col]}")
    if r["paper_time_ratio"] != "-" or r["paper_memory_ratio"] != "-":
        bad.append(f"N={n} k={k}: no paper number exists for this cell")
    if n == 128 and not skipped:
        unf, lin = int(r["maxbatch_std_unfused"]), int(r["maxbatch_linformer"])
        if not 0 < unf < lin:
            bad.append(f"N=128 k={k}: max batch unfused {unf} vs linformer {lin}")
        if float(r["memory_ratio_vs_unfused"]) <= 1:
            bad.append(f"N=128 k={k}: memory saved vs unfused {r['memory_ratio_vs_unfused']}")
for b in bad:
    print("FAIL:", b)
print("checked", len(rows), "rows")
sys.exit(1 if bad else 0)
