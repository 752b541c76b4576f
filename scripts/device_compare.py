"""Compares GPU outputs with the CPU reference (tolerances per dtype), or
with --torch times PyTorch SDPA on the prepared cases for a side-by-side."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "run"))
import stio  # noqa: E402


def compare(cpu_path, gpu_path, name):
    cpu, gpu = stio.read(cpu_path), stio.read(gpu_path)
    # Case names say fp32/fp16/bf16 ("dense_fp16_d64", "..._d64@sm_70").
    tol = (2e-4 if "fp32" in name or "f32" in name else 8e-2 if "bf16" in name else
           3e-2 if "fp16" in name or "f16" in name else 8e-2)
    ok = True
    for t in sorted(cpu):
        if t not in gpu:
            print("FAIL %s: GPU output lacks %s" % (name, t))
            ok = False
            continue
        a, b = cpu[t][1], gpu[t][1]
        scale = max(1e-6, max(abs(x) for x in a if abs(x) != float("inf")) if a else 1)
        worst = max((abs(x - y) for x, y in zip(a, b) if abs(x) != float("inf")), default=0) / scale
        nan = any(y != y for y in b)
        good = worst <= tol and not nan
        ok &= good
        print("%s %s %-4s max |gpu-cpu|/max|cpu| = %.2e (tol %.0e)%s" %
              ("ok  " if good else "FAIL", name, t, worst, tol, " NaN!" if nan else ""))
    return ok


def torch_side_by_side(cases):
    try:
        import time
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001
        print("torch unavailable:", e)
        return
    for name in sorted(os.listdir(cases)):
        if not name.startswith("dense_f16"):
            continue
        q = stio.read(os.path.join(cases, name, "in.safetensors"))
        t = {k: torch.tensor(v[1]).reshape(v[0]).cuda().half() for k, v in q.items() if k != "lengths"}
        for _ in range(3):
            F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True)
        torch.cuda.synchronize()
        t0 = time.time()
        for _ in range(20):
            F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True)
        torch.cuda.synchronize()
        print("%s: torch SDPA forward %.3f ms (fp16, causal)" % (name, (time.time() - t0) / 20 * 1e3))


if __name__ == "__main__":
    if sys.argv[1] == "--torch":
        torch_side_by_side(sys.argv[2])
    else:
        sys.exit(0 if compare(*sys.argv[1:4]) else 1)
