"""attnc through PyTorch on the GPU (scripts/device-check.sh, step 6).

The device machine has CUDA and PyTorch but no MLIR, so libattnc there is
the runtime-only build: it loads artifacts compiled here
(scripts/device-prepare.sh) instead of compiling specs (attnc_load).

1. Correctness, f32 artifacts (TORCH_DIR): causal, a learned ALiBi slope
   and low-rank, through `attnc.attention(artifact)` on CUDA tensors,
   forward and the gradients of q, k, v and the parameters against float64
   references on the CPU; a side stream with torch's sync debug mode set to
   "error" (the op must not synchronise); the caller's current device and
   context unchanged (also from a thread with a context of its own);
   capture into a CUDA graph and replay; torch.compile(fullgraph=True)
   equal to eager.
2. Speed through the op, fp16 artifacts (BENCH_DIR, as step 4's): the op's
   forward and forward+backward beside SDPA (its fastest backend) and
   FlexAttention (torch.compile'd), CUDA events, median of 10.

Writes a Markdown report to OUT_MD; exits 1 when a check fails. With
--simulate the checks of part 1 run on CPU tensors through the CUDA kernels
on the SIMT emulator (target "cuda-sim"), at small shapes, and part 2 is
skipped: the rehearsal without a GPU.

Usage: device_torch.py TORCH_DIR BENCH_DIR OUT_MD [--simulate]
"""
import os
import sys

from device_bench import timed  # CUDA events, median of 10 after 3 warm-ups


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    simulate = "--simulate" in sys.argv
    if len(args) != 3:
        sys.exit(__doc__)
    torch_dir, bench_dir, out_md = args
    lines, failed = [], False
    try:
        import torch
        import attnc
    except ImportError as e:
        with open(out_md, "w") as f:
            f.write(f"(skipped: {e})\n")
        print(f"device_torch: skipped: {e}")
        return 0
    F = torch.nn.functional
    dev = "cpu" if simulate else "cuda"
    target = "cuda-sim" if simulate else None
    lines.append(f"libattnc: `{attnc.library_path()}`; torch {torch.__version__}"
                 + ("; on the SIMT emulator (rehearsal)" if simulate else
                    f"; {torch.cuda.get_device_name()}"))
    lines.append("")

    def report(ok, what):
        nonlocal failed
        failed |= not ok
        line = ("ok   " if ok else "FAIL ") + what
        print(line)
        lines.append("- " + line)

    def flush():  # the report so far: a timeout later keeps what was done
        with open(out_md, "w") as f:
            f.write("\n".join(lines) + "\n")

    def rel(a, b):
        return ((a.detach().cpu().double() - b.detach().double()).abs().max() /
                b.detach().double().abs().max()).item()

    # ---- 1. correctness ------------------------------------------------
    B, H, N, D = (2, 3, 77, 64) if simulate else (2, 8, 1000, 64)
    torch.manual_seed(0)

    def grads_match(name, f, ref, extra=(), tol=1e-4):
        """f(q, k, v, *extra) and every gradient against ref's in float64."""
        base = [torch.randn(B, H, N, D) for _ in range(3)] + [e.cpu() for e in extra]
        ins = [t.clone().to(dev).requires_grad_(True) for t in base]
        refs = [t.double().requires_grad_(True) for t in base]
        try:
            out = f(*ins)
            want = ref(*refs)
            g = torch.randn_like(want)
            out.backward(g.float().to(dev))
            want.backward(g)
            errs = [rel(out, want)] + [rel(a.grad, b.grad) for a, b in zip(ins, refs)]
            report(max(errs) < tol, f"{name}: out and {len(ins)} gradients within "
                   f"{max(errs):.1e} of float64 (tolerance {tol:g}) at {[B, H, N, D]}")
        except Exception as e:  # a failed check, named, and the next one runs
            report(False, f"{name}: {type(e).__name__}: {e}")

    def art(name):
        return os.path.join(torch_dir, name)

    causal = attnc.attention(art("causal_f32_d64"), target=target)
    grads_match("causal", causal,
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))

    alibi = attnc.attention(art("alibi_f32_d64"), target=target)
    rel_pos = (torch.arange(N)[None, :] - torch.arange(N)[:, None]).double()

    def alibi_ref(q, k, v, slope):
        bias = slope[:, None, None] * rel_pos
        bias = bias.masked_fill(rel_pos > 0, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])
    grads_match("learned ALiBi slope", lambda q, k, v, s: alibi(q, k, v, slope=s), alibi_ref,
                extra=[torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)])])

    lowrank = attnc.attention(art("lowrank_f32_d64"), target=target)
    kproj, nmax = 32, 1024

    def lowrank_ref(q, k, v, E, Fp):
        kp, vp = E[:, :N] @ k, Fp[:, :N] @ v  # [B, H, k, D]
        return F.scaled_dot_product_attention(q, kp, vp)
    grads_match("low-rank (k 32)", lambda q, k, v, E, Fp: lowrank(q, k, v, E=E, F=Fp),
                lowrank_ref, extra=[torch.randn(kproj, nmax) / 32, torch.randn(kproj, nmax) / 32])

    if not simulate:
        q, k, v = (torch.randn(4, 16, 2048, 64, device="cuda") for _ in range(3))
        want = causal(q, k, v)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(side):
                q2 = q * 1.0  # made on the side stream just before the op
                torch.cuda.set_sync_debug_mode("error")
                try:
                    got = causal(q2, k, v)
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            torch.cuda.current_stream().wait_stream(side)
            report(torch.equal(got, want), "side stream, sync debug mode 'error': no "
                   "synchronisation in the op, and the same bits as on the default stream")
        except Exception as e:
            report(False, f"side stream: {type(e).__name__}: {e}")
        caller_state_checks(torch, attnc, causal, q, k, v, report)
        graph_checks(torch, causal, q, k, v, report)
        try:
            qc = q.clone().requires_grad_(True)
            eager = causal(qc, k, v)
            compiled = torch.compile(lambda q, k, v: causal(q, k, v), fullgraph=True)(qc, k, v)
            (ge,) = torch.autograd.grad(eager.sum(), qc)
            (gc,) = torch.autograd.grad(compiled.sum(), qc)
            report(torch.equal(eager, compiled) and torch.equal(ge, gc),
                   "torch.compile(fullgraph=True) equals eager, forward and dq")
        except Exception as e:
            report(False, f"torch.compile: {type(e).__name__}: {e}")
    lines.append("")
    flush()

    # ---- 2. speed through the op ----------------------------------------
    if simulate:
        lines.append("(speed: skipped in the rehearsal)")
    else:
        timings(torch, attnc, bench_dir, report, lines, flush)
    flush()
    return 1 if failed else 0


def _driver():
    """libcuda through ctypes: the current context of the calling thread."""
    import ctypes
    cu = ctypes.CDLL("libcuda.so.1")

    def current():
        c = ctypes.c_void_p()
        assert cu.cuCtxGetCurrent(ctypes.byref(c)) == 0
        return c.value
    return ctypes, cu, current


def caller_state_checks(torch, attnc, causal, q, k, v, report):
    """attnc leaves the caller's CUDA state as it found it: the current
    device and context after a forward and backward through the op; and,
    from a thread whose current context is one of its own (another
    context on the same GPU, as a library with its own would have), the
    raw C ABI call returns with that context still current."""
    try:
        ctypes, cu, current = _driver()
        device, ctx = torch.cuda.current_device(), current()
        qg = q[:1].clone().requires_grad_(True)
        causal(qg, k[:1], v[:1]).sum().backward()
        torch.cuda.synchronize()
        report(torch.cuda.current_device() == device and current() == ctx,
               "the op leaves the current device and context as they were "
               f"(device {device}, context {ctx:#x})")
        # The variant behind the op for these shapes, called raw.
        key = attnc._torch._compiled(causal.spec, causal.name, int(q.shape[1]), int(q.shape[3]),
                                     0, False, *causal._target(q))
        var, view = attnc._torch._registry[key], attnc._torch._view
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        torch.cuda.synchronize()
        result = {}

        def in_thread():
            mine, dev = ctypes.c_void_p(), ctypes.c_int()
            try:
                assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
                # cuCtxCreate_v2 makes the new context current on this thread.
                assert cu.cuCtxCreate_v2(ctypes.byref(mine), 0, dev) == 0
                var.call_forward(view(q), view(k), view(v), view(out), view(lse), stream=stream)
                result["after"], result["mine"] = current(), mine.value
            except Exception as e:  # reported below
                result["error"] = f"{type(e).__name__}: {e}"
            finally:
                if mine.value:
                    cu.cuCtxPopCurrent_v2(None)
                    cu.cuCtxDestroy_v2(mine)
        import threading
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()
        torch.cuda.synchronize()
        if "error" in result:
            report(False, f"a call from a thread with its own context: {result['error']}")
        else:
            same = result["after"] == result["mine"]
            ref = causal(q, k, v)
            report(same and torch.equal(out, ref),
                   "a raw C ABI call from a thread with its own context leaves that context "
                   f"current ({'yes' if same else 'no'}) and gives the op's bits")
    except Exception as e:
        report(False, f"caller state: {type(e).__name__}: {e}")


def graph_checks(torch, causal, q, k, v, report):
    """The op captured into a CUDA graph (forward and backward) after warm-up
    calls of the same shape, replayed on new inputs: the same bits as eager
    calls on those inputs."""
    try:
        qs, ks, vs = q[:2].clone(), k[:2].clone(), v[:2].clone()
        do = torch.randn_like(qs)
        qg = qs.clone().requires_grad_(True)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: the workspace reaches its size
            for _ in range(2):
                causal(qg, ks, vs).backward(do)
                qg.grad = None
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = causal(qg, ks, vs)
            out.backward(do)
        fresh = torch.randn_like(qs)
        with torch.no_grad():
            qg.copy_(fresh)
        g.replay()
        torch.cuda.synchronize()
        qe = fresh.clone().requires_grad_(True)
        want = causal(qe, ks, vs)
        want.backward(do)
        report(torch.equal(out, want) and torch.equal(qg.grad, qe.grad),
               "CUDA graph: forward and backward captured after warm-up, replayed on new "
               "inputs, equal eager calls bit for bit")
    except Exception as e:
        report(False, f"CUDA graph: {type(e).__name__}: {e}")


def timings(torch, attnc, bench_dir, report, out, flush):
    """The op, SDPA and FlexAttention on the same fp16 shapes: ms and
    ratios, a table row appended to `out` (and flushed) per shape."""
    F = torch.nn.functional
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)
    except Exception:  # an older torch
        flex = None
    out += ["Ratios are attnc's time over the other's (< 1: attnc is faster); fp16, CUDA events, "
            "median of 10 after 3 warm-ups, through the PyTorch op (torch.library custom op, "
            "current stream).", "",
            "| kernel | shape | attnc fwd ms | SDPA | Flex | attnc fwd+bwd ms | SDPA | Flex |",
            "|---|---|---|---|---|---|---|---|"]
    for name, causal in (("dense_d64", False), ("causal_d128", True)):
        path = os.path.join(bench_dir, name)
        if not os.path.isdir(path):
            continue
        D = int(name.split("_d")[1])
        f = attnc.attention(path)
        for B, H, N in ((4, 16, 1024), (2, 16, 4096)):
            try:
                qkv = [torch.randn(B, H, N, D, device="cuda", dtype=torch.float16,
                                   requires_grad=True) for _ in range(3)]
                do = torch.randn(B, H, N, D, device="cuda", dtype=torch.float16)
                sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                runs = [("attnc", lambda q, k, v: f(q, k, v)), ("sdpa", sdpa)]
                if flex is not None:
                    mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, N, N) \
                        if causal else None
                    runs.append(("flex", lambda q, k, v: flex(q, k, v, block_mask=mask)))
                ms = {}
                for label, fn in runs:
                    fwd = timed(torch, lambda: fn(*qkv))

                    def both():
                        o = fn(*qkv)
                        torch.autograd.grad(o, qkv, do)
                    ms[label] = (fwd, timed(torch, both))
                ratio = lambda a, i: f"{ms['attnc'][i] / ms[a][i]:.2f}x" if a in ms else "-"
                out.append(f"| {name} | [{B}, {H}, {N}, {D}] | {ms['attnc'][0]:.3f} | "
                           f"{ratio('sdpa', 0)} | {ratio('flex', 0)} | {ms['attnc'][1]:.3f} | "
                           f"{ratio('sdpa', 1)} | {ratio('flex', 1)} |")
            except Exception as e:
                report(False, f"timing {name} [{B}, {H}, {N}, {D}]: {type(e).__name__}: {e}")
            flush()


if __name__ == "__main__":
    sys.exit(main())
