"""The attnc package's core (numpy, no torch; docs/pytorch.md) against
attention in float64 written here. test_torch.py covers the PyTorch op."""
import math

import numpy as np
import pytest

import attnc

CAUSAL = "attention a {\n  mask causal\n}\n"
ALIBI = ("attention alibi {\n  param slope(h) = alibi\n"
         "  score s + slope(h) * float(kv - q)\n  mask causal\n}\n")
B, H, N, D = 2, 3, 77, 64  # N: no tile multiple


def reference(q, k, v, causal=True, slope=None, lengths=None):
    """Softmax attention in float64 (numpy)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    n, m = s.shape[-2:]
    rel = np.arange(m)[None, :] - np.arange(n)[:, None]  # kv - q
    if slope is not None:
        s = s + slope.astype(np.float64)[None, :, None, None] * rel
    if causal:
        s = np.where(rel > 0, -np.inf, s)
    if lengths is not None:
        keep = np.arange(m)[None, :] < lengths[:, None]
        s = np.where(keep[:, None, None, :], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v


def rel_err(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(0)


def test_core_forward_backward_numpy(rng):
    q, k, v, dout = (rng.standard_normal((B, H, N, D), dtype=np.float32) for _ in range(4))
    var = attnc.Variant(CAUSAL, heads=H, head_dim=D)
    assert var.name == "a" and var.params == []
    out, lse = var.forward(q, k, v)
    assert rel_err(out, reference(q, k, v)) < 1e-5
    # The gradient through the float64 reference, by central differences on
    # a few entries of q: (f(q + e) - f(q - e)) / 2e with f = <out, dout>.
    dq, dk, dv, dparams = var.backward(q, k, v, out, lse, dout)
    assert dparams == []
    for (b, h, i, d) in [(0, 0, 5, 3), (1, 2, 76, 63), (1, 1, 40, 0)]:
        e = np.zeros_like(q, dtype=np.float64)
        e[b, h, i, d] = 1e-3
        f = lambda x: float((reference(x, k, v) * dout.astype(np.float64)).sum())
        num = (f(q + e) - f(q - e)) / 2e-3
        assert abs(dq[b, h, i, d] - num) < 1e-3 * max(1.0, abs(num))


def test_core_errors_name_the_place(rng):
    with pytest.raises(attnc.AttncError, match=r"<spec>:2:8: error: unknown name 'causul'"):
        attnc.Variant("attention a {\n  mask causul\n}\n", heads=H, head_dim=D)
    var = attnc.Variant(CAUSAL, heads=H, head_dim=D)
    q = rng.standard_normal((B, H, N, D), dtype=np.float32)
    with pytest.raises(attnc.AttncError, match=r"expected shape \[2, 3, 77, 64\]"):
        var.forward(q[..., :32].copy(), q, q)
    strided = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    with pytest.raises(attnc.AttncError, match="not contiguous"):
        var.forward(strided, q, q)
    out, _ = var.forward(strided, q, q, allow_copies=True)
    assert rel_err(out, reference(q, q, q)) < 1e-5
