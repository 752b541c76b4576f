"""The GPU benchmark's side by side (scripts/device-check.sh, step 4): reads
the CSVs `attnc-rt bench --csv` wrote into BENCH_DIR (one per prepared
artifact: dense_d64, causal_d128, lowrank_d64, lsh_d64, ...), times PyTorch
on the same shapes and dtype, and writes a Markdown table of times and
attnc/torch ratios (< 1: attnc is faster) to OUT_MD.

  dense, causal:  torch SDPA (its fastest backend) and FlexAttention
                  (torch.compile'd, one shape per artifact: compiling is slow);
  low-rank:       SDPA over the k projected keys, plus the two projections
                  E K, F V as torch matmuls (attnc's projections run on the
                  host and are not in its kernel time: both are shown);
  LSH:            dense SDPA at the same N (what LSH replaces).

Forward and backward are timed separately with CUDA events, median of 10
after 3 warm-ups. The table is rewritten after each row, so a timeout keeps
the rows done.

Usage: device_bench.py BENCH_DIR OUT_MD [--flex=yes|no|only] [--key=FILE]

--flex=no leaves FlexAttention out; --flex=only times FlexAttention alone
(causal artifacts first: compiling it is the slow part, and device-check.sh
runs it under a cap of its own). --key=FILE writes a one-line summary of
the attnc/SDPA ratios.
"""
import csv
import os
import statistics
import sys


def timed(torch, fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def fwd_bwd(torch, attend, shape, dtype, kv_len=None):
    B, H, N, D = shape
    kv = kv_len or N
    q = torch.randn(B, H, N, D, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(B, H, kv, D, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(B, H, kv, D, device="cuda", dtype=dtype, requires_grad=True)
    do = torch.randn(B, H, N, D, device="cuda", dtype=dtype)
    fwd = timed(torch, lambda: attend(q, k, v))
    out = attend(q, k, v)
    bwd = timed(torch, lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
    return fwd, bwd


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    if len(args) != 2 or opts.get("flex", "yes") not in ("yes", "no", "only"):
        sys.exit(__doc__)
    bench_dir, out_md = args
    flex_mode, key_file = opts.get("flex", "yes"), opts.get("key")
    lines = ["| artifact | kind | B,H,N,D | attnc fwd ms | torch fwd ms | fwd ratio | "
             "attnc bwd ms | torch bwd ms | bwd ratio | torch |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    try:
        import torch
        import torch.nn.functional as F
        assert torch.cuda.is_available(), "no CUDA device for torch"
    except Exception as e:  # noqa: BLE001
        open(out_md, "w").write("torch unavailable: %s\n" % e)
        print("torch unavailable:", e)
        return 0
    flex, flex_error = None, "left out (--flex=no)"
    if flex_mode != "no":
        try:
            from torch.nn.attention.flex_attention import flex_attention
            flex = torch.compile(flex_attention)
        except Exception as e:  # noqa: BLE001
            flex, flex_error = None, str(e)
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    flex_done = set()
    sdpa_ratios = []

    def write(final=False):
        tail = []
        if final and flex is None:
            tail.append("\nFlexAttention unavailable: %s" % flex_error)
        tail.append("\ntorch %s; times are medians of 10 by CUDA events%s." % (
            torch.__version__, "" if final else " (unfinished: rows so far)"))
        with open(out_md + ".tmp", "w") as f:
            f.write("\n".join(lines + tail) + "\n")
        os.replace(out_md + ".tmp", out_md)

    names = sorted(n for n in os.listdir(bench_dir) if n.endswith(".csv"))
    if flex_mode == "only":
        names.sort(key=lambda n: (not n.startswith("causal"), n))
    for name in names:
        art = name[:-4]
        causal = art.startswith("causal")
        for r in csv.DictReader(open(os.path.join(bench_dir, name))):
            shape = tuple(int(r[x]) for x in ("B", "H", "N", "D"))
            dtype = dtypes[r["dtype"]]
            a_f, a_b = float(r["fwd_ms"]), float(r["bwd_ms"])
            rows = []
            if flex_mode == "only":
                pass
            elif r["kind"].startswith("lowrank"):
                k = int(r["kind"].split("=")[1])
                sd = lambda q, kk, vv: F.scaled_dot_product_attention(q, kk, vv)  # noqa: E731
                rows.append(("SDPA over k=%d keys" % k,) + fwd_bwd(torch, sd, shape, dtype, kv_len=k))
                B, H, N, D = shape
                E = torch.randn(k, N, device="cuda", dtype=dtype)
                K = torch.randn(B, H, N, D, device="cuda", dtype=dtype)
                proj = timed(torch, lambda: (E @ K, E @ K))
                rows.append(("+ projections E K, F V (fwd)", proj, float("nan")))
            else:
                sd = lambda q, kk, vv: F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)  # noqa: E731
                label = "dense SDPA" if r["kind"] == "lsh" else "SDPA"
                rows.append((label,) + fwd_bwd(torch, sd, shape, dtype))
            if flex and r["kind"] == "dense" and art not in flex_done:
                flex_done.add(art)
                try:
                    from torch.nn.attention.flex_attention import create_block_mask
                    bm = None
                    if causal:
                        bm = create_block_mask(lambda b, h, q, kv: q >= kv, None, None,
                                               shape[2], shape[2])
                    fl = lambda q, kk, vv: flex(q, kk, vv, block_mask=bm)  # noqa: E731
                    rows.append(("FlexAttention",) + fwd_bwd(torch, fl, shape, dtype))
                except Exception as e:  # noqa: BLE001
                    rows.append(("FlexAttention failed: %s" % str(e)[:60], float("nan"), float("nan")))
            for label, t_f, t_b in rows:
                line = "| %s | %s | %s | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f | %s |" % (
                    art, r["kind"], ",".join(map(str, shape)), a_f, t_f, a_f / t_f if t_f else float("nan"),
                    a_b, t_b, a_b / t_b if t_b == t_b and t_b else float("nan"), label)
                lines.append(line)
                print(line, flush=True)
                if label in ("SDPA", "dense SDPA") and t_f and t_b == t_b and t_b:
                    sdpa_ratios.append((a_f / t_f, a_b / t_b))
                write()
    write(final=True)
    if key_file:
        with open(key_file, "w") as f:
            if sdpa_ratios:
                fw, bw = sorted(x[0] for x in sdpa_ratios), sorted(x[1] for x in sdpa_ratios)
                f.write("attnc/SDPA over %d shapes: fwd %.2f-%.2fx, bwd %.2f-%.2fx\n" % (
                    len(fw), fw[0], fw[-1], bw[0], bw[-1]))
            elif flex_mode == "only":
                f.write("FlexAttention rows: %d\n" % (len(lines) - 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
