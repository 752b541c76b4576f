"""attnc's CUDA kernels through the PyTorch op, against SDPA in float64.

Each case runs twice: on the SIMT emulator (target "cuda-sim": CPU
tensors, the CUDA kernels and the ABI's device half, CApiCuda.cpp), on
every machine; and on a GPU (CUDA tensors, the current stream), skipped
without one. scripts/device-check.sh runs the GPU half."""
import pytest

import attnc

torch = pytest.importorskip("torch")
F = torch.nn.functional

CAUSAL = "attention a {\n  mask causal\n}\n"
ALIBI = ("attention alibi {\n  param slope(h) = alibi\n"
         "  score s + slope(h) * float(kv - q)\n  mask causal\n}\n")
LOWRANK = "attention lin {\n  kv lowrank(k = 16, share = headwise)\n}\n"

WHERE = [pytest.param("cuda-sim", id="emulator"),
         pytest.param("cuda", id="gpu", marks=pytest.mark.skipif(
             not torch.cuda.is_available(), reason="no CUDA device"))]


def device_of(where):
    return "cuda" if where == "cuda" else "cpu"


def rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def check(f, ref, q, k, v, tol, **kw):
    """f's output and q, k, v gradients against ref's in float64."""
    qs = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    rs = [x.detach().cpu().double().requires_grad_(True) for x in (q, k, v)]
    out = f(*qs, **kw)
    want = ref(*rs)
    assert out.dtype == q.dtype and out.device == q.device
    assert rel(out.cpu(), want) < tol
    g = torch.randn_like(want)
    out.backward(g.to(q.dtype).to(q.device))
    want.backward(g)
    for a, b in zip(qs, rs):
        assert a.grad.dtype == q.dtype and rel(a.grad.cpu(), b.grad) < tol
    return qs


@pytest.mark.parametrize("where", WHERE)
def test_causal_f32_and_bf16_match_sdpa(where):
    torch.manual_seed(10)
    dev = device_of(where)
    f = attnc.attention(CAUSAL, target=where)
    ref = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    q, k, v = (torch.randn(2, 3, 77, 64, device=dev) for _ in range(3))
    check(f, ref, q, k, v, 1e-4)
    # bf16 tensors: bf16 kernels, read and written in place.
    check(f, ref, *(t.bfloat16() for t in (q, k, v)), 2e-2)


def matches_cpu_op(spec, where, tensors, weights=(), tol=1e-4, lengths=None):
    """The op at `where` against the CPU op on the same tensors (q, k, v,
    then the named weights; the CPU op takes them in float32): the output
    and every tensor's gradient."""
    dev = tensors[0].device
    ins = [t.detach().clone().requires_grad_(True) for t in tensors]
    cins = [t.detach().cpu().float().requires_grad_(True) for t in tensors]
    out = attnc.attention(spec, target=where)(*ins[:3], lengths=lengths,
                                              **dict(zip(weights, ins[3:])))
    want = attnc.attention(spec)(*cins[:3], lengths=None if lengths is None else lengths.cpu(),
                                 **dict(zip(weights, cins[3:])))
    assert out.dtype == tensors[0].dtype and rel(out.cpu(), want) < tol
    g = torch.randn_like(want)
    out.backward(g.to(tensors[0].dtype).to(dev))
    want.backward(g)
    for a, b in zip(ins, cins):
        assert rel(a.grad.cpu(), b.grad) < tol


@pytest.mark.parametrize("where", WHERE)
def test_learned_slope_and_lowrank_gradients(where):
    torch.manual_seed(11)
    dev = device_of(where)
    q, k, v = (torch.randn(2, 3, 50, 32, device=dev) for _ in range(3))
    slope = torch.tensor([0.5, 0.25, 0.125], device=dev)
    matches_cpu_op(ALIBI, where, [q, k, v, slope], ["slope"])
    E, Fp = (torch.randn(16, 64, device=dev) / 8 for _ in range(2))
    matches_cpu_op(LOWRANK, where, [q, k, v, E, Fp], ["E", "F"])


@pytest.mark.parametrize("where", WHERE)
def test_cross_attention_dense_and_lowrank(where):
    """77 queries over 50 keys: dense against SDPA in float64, low-rank
    (E, F over the 50 keys) against the CPU op."""
    torch.manual_seed(14)
    dev = device_of(where)
    q = torch.randn(2, 3, 77, 64, device=dev)
    k, v = (torch.randn(2, 3, 50, 64, device=dev) for _ in range(2))
    check(attnc.attention("attention d {\n}\n", target=where),
          F.scaled_dot_product_attention, q, k, v, 1e-4)
    E, Fp = (torch.randn(16, 64, device=dev) / 8 for _ in range(2))
    matches_cpu_op(LOWRANK, where, [q, k, v, E, Fp], ["E", "F"])


@pytest.mark.parametrize("where", WHERE)
def test_lowrank_key_padding_f32_and_f16(where):
    """Low-rank with key-padding lengths (one row cut to 21 of 50 keys):
    the projections run on the device and leave padded keys out, on the
    fp32 GEMM for float32 tensors and on tensor cores for float16 ones
    (strided_gemm_mma); against the CPU op, which projects on the host."""
    torch.manual_seed(16)
    dev = device_of(where)
    spec = "attention lin {\n  kv lowrank(k = 16, share = headwise)\n  mask padding\n}\n"
    q, k, v = (torch.randn(2, 3, 50, 32, device=dev) for _ in range(3))
    E, Fp = (torch.randn(16, 64, device=dev) / 8 for _ in range(2))
    lengths = torch.tensor([50, 21], dtype=torch.int32, device=dev)
    for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 2e-2)):
        matches_cpu_op(spec, where, [t.to(dtype) for t in (q, k, v)] + [E, Fp], ["E", "F"],
                       tol=tol, lengths=lengths)


@pytest.mark.parametrize("where", WHERE)
def test_lsh_f16_on_tensor_cores_matches_the_cpu_op(where):
    """Reformer LSH in fp16 with chunks of 32: the per-round forward, dQ and
    dK/dV run on tensor cores (lsh_fwd_mma, lsh_bwd_*_mma). Against the CPU
    op on the same rotations, which test_torch.py checks against
    reformer_pytorch: the output and the q and v gradients, causal or not."""
    torch.manual_seed(15)
    dev = device_of(where)
    for causal in (False, True):
        spec = ("attention l {\n  qk shared\n  bucket lsh(buckets = 8, rounds = 2, chunk = 32, "
                "before = 1)\n" + ("  mask causal\n" if causal else "") + "}\n")
        q, v = (torch.randn(2, 2, 100, 64, device=dev).half() for _ in range(2))
        rot = torch.randn(2, 64, 4, device=dev)
        ins = [t.detach().clone().requires_grad_(True) for t in (q, v)]
        cins = [t.detach().cpu().float().requires_grad_(True) for t in (q, v)]
        out = attnc.attention(spec, target=where)(ins[0], ins[0], ins[1], lsh_rotations=rot)
        want = attnc.attention(spec)(cins[0], cins[0], cins[1], lsh_rotations=rot.cpu())
        assert out.dtype == torch.float16 and rel(out.cpu(), want) < 2e-2
        g = torch.randn_like(want)
        out.backward(g.half().to(dev))
        want.backward(g)
        for a, b in zip(ins, cins):
            assert rel(a.grad.cpu(), b.grad) < 2e-2


@pytest.mark.parametrize("where", WHERE)
def test_strided_inputs_copy_only_when_allowed(where):
    dev = device_of(where)
    x = torch.randn(2, 77, 3, 64, device=dev)
    q = x.transpose(1, 2)  # [B, H, N, D] view of a [B, N, H, D] tensor
    strict = attnc.attention(CAUSAL, target=where, allow_copies=False)
    with pytest.raises(attnc.AttncError, match="contiguous, 16-byte aligned"):
        strict(q, q, q)
    lenient = attnc.attention(CAUSAL, target=where)
    c = q.contiguous()
    assert torch.equal(lenient(q, q, q), lenient(c, c, c))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_gpu_side_stream_and_no_sync():
    """On a side stream the op's kernels follow the work before them on
    that stream; the op itself never synchronises (torch's sync debug
    mode raises on any synchronising call it makes)."""
    torch.manual_seed(12)
    f = attnc.attention(CAUSAL)
    q, k, v = (torch.randn(4, 8, 1024, 64, device="cuda") for _ in range(3))
    want = f(q, k, v)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        q2 = q * 1.0  # produced on the side stream, just before the op
        torch.cuda.set_sync_debug_mode("error")
        try:
            got = f(q2, k, v)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got, want)


def _cli():
    import os
    import pathlib
    path = os.environ.get("ATTNC_CLI") or str(
        pathlib.Path(__file__).resolve().parents[2] / "build" / "bin" / "attnc")
    if not os.path.exists(path):
        pytest.skip("no attnc command line to compile an artifact with")
    return path


@pytest.mark.parametrize("where", WHERE)
def test_compiled_artifact_runs_through_the_op(where, tmp_path):
    """An artifact of `attnc compile` (what a runtime-only libattnc, as on
    the GPU machine, can run) through the op: the CPU kernels, and the
    CUDA kernels on the emulator or a GPU."""
    import subprocess
    spec = tmp_path / "a.attn"
    spec.write_text(CAUSAL + "model m { vocab 64 seq 128 d_model 192 heads 3 layers 1 dtype fp32 "
                    "objective causal_lm layer { attention a ffn } }\n")
    torch.manual_seed(13)
    dev = device_of(where)
    q, k, v = (torch.randn(2, 3, 77, 64, device=dev) for _ in range(3))
    ref = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for kind in ("cpu", "cuda"):
        out = tmp_path / kind
        subprocess.run([_cli(), "compile", str(spec), "--target", kind, "-o", str(out)],
                       check=True, capture_output=True)
        if kind == "cpu" and where == "cuda":
            continue
        f = attnc.attention(str(out), "m_attention", target=None if kind == "cpu" else where)
        check(f, ref, q, k, v, 1e-4)
    with pytest.raises(attnc.AttncError, match="compiled for head dim 64"):
        attnc.attention(str(tmp_path / "cuda"), target=where)(*(t[..., :32] for t in (q, q, q)))
