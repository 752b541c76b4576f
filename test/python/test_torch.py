"""attnc's PyTorch op (docs/pytorch.md) against torch's SDPA in float64,
through autograd and torch.compile(fullgraph=True); attnc.nn.Attention
training a small model. Skipped without torch."""
import pytest

import attnc

torch = pytest.importorskip("torch")
F = torch.nn.functional

CAUSAL = "attention a {\n  mask causal\n}\n"
ALIBI = ("attention alibi {\n  param slope(h) = alibi\n"
         "  score s + slope(h) * float(kv - q)\n  mask causal\n}\n")

def sdpa64(q, k, v, mask=None, causal=False):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask,
                                          is_causal=causal)


def check_against(f, ref, q, k, v, tol=1e-4, **kw):
    """f(q, k, v) and its gradients against ref's (float64), relative to the largest."""
    qs = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    rs = [x.detach().double().requires_grad_(True) for x in (q, k, v)]
    out = f(*qs, **kw)
    want = ref(*rs)
    assert (out.double() - want).abs().max() / want.abs().max() < tol
    g = torch.randn_like(want)
    out.backward(g.float())
    want.backward(g)
    for a, b in zip(qs, rs):
        assert (a.grad.double() - b.grad).abs().max() / b.grad.abs().max() < tol


def test_issue_example_matches_sdpa():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 77, 64) for _ in range(3))
    f = attnc.attention("attention a {\n  mask causal\n}\n")
    check_against(f, lambda q, k, v: sdpa64(q, k, v, causal=True), q, k, v)


def test_dense_and_key_padding_match_sdpa():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 50, 32) for _ in range(3))
    dense = attnc.attention("attention d {\n}\n")
    check_against(dense, sdpa64, q, k, v)
    padded = attnc.attention("attention p {\n  mask padding\n}\n")
    lengths = torch.tensor([50, 23], dtype=torch.int32)
    keep = torch.arange(50)[None, :] < lengths[:, None]
    mask = keep[:, None, None, :].expand(2, 3, 50, 50)
    check_against(lambda q, k, v: padded(q, k, v, lengths=lengths),
                  lambda q, k, v: sdpa64(q, k, v, mask=mask), q, k, v)


def test_score_modifier_matches_torch():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 3, 77, 64) for _ in range(3))
    f = attnc.attention(ALIBI)
    slope = torch.tensor([2.0 ** (-8.0 * (h + 1) / 3) for h in range(3)])
    rel = torch.arange(77)[None, :] - torch.arange(77)[:, None]
    bias = (slope[:, None, None] * rel).double()
    bias = bias.masked_fill(rel > 0, float("-inf"))
    check_against(f, lambda q, k, v: sdpa64(q, k, v, mask=bias[None]), q, k, v)


def test_torch_compile_fullgraph_equals_eager():
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 3, 77, 64, requires_grad=True) for _ in range(3))
    f = attnc.attention(CAUSAL)
    eager = f(q, k, v)
    compiled = torch.compile(lambda q, k, v: f(q, k, v), fullgraph=True)(q, k, v)
    assert torch.equal(eager, compiled)
    (ge,) = torch.autograd.grad(eager.sum(), q)
    (gc,) = torch.autograd.grad(compiled.sum(), q)
    assert torch.equal(ge, gc)


def test_nn_attention_trains():
    """Two attention layers with learned ALiBi slopes and a linear head,
    50 steps of Adam on a copy task: the loss falls."""
    torch.manual_seed(4)
    vocab, n, d, heads = 16, 24, 32, 2

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            self.qkv = torch.nn.ModuleList(torch.nn.Linear(d, 3 * d) for _ in range(2))
            self.attn = torch.nn.ModuleList(
                attnc.nn.Attention(ALIBI, heads=heads, head_dim=d // heads, seq_len=n)
                for _ in range(2))
            self.head = torch.nn.Linear(d, vocab)

        def forward(self, x):
            h = self.emb(x)
            for qkv, attn in zip(self.qkv, self.attn):
                q, k, v = qkv(h).view(x.shape[0], n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
                h = h + attn(q, k, v).transpose(1, 2).reshape(x.shape[0], n, d)
            return self.head(h)

    model = Model()
    assert any(name.endswith("weights.slope") for name, _ in model.named_parameters())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(50):
        x = torch.randint(0, vocab, (8, n))
        y = torch.roll(x, 1, dims=1)  # predict the previous token: needs attention
        loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.85 * sum(losses[:5]) / 5, losses


# The peers on attnc's CPU kernels, and on its CUDA kernels under the SIMT
# emulator: fp32, and (Linformer) fp16, whose projections and attention run
# on tensor cores, within fp16's rounding of the inputs.
PEER_TARGETS = [pytest.param(None, torch.float32, 1e-4, id="cpu"),
                pytest.param("cuda-sim", torch.float32, 1e-4, id="emulator-f32"),
                pytest.param("cuda-sim", torch.float16, 2e-2, id="emulator-f16")]


@pytest.mark.parametrize("target,dtype,tol", PEER_TARGETS)
def test_lowrank_matches_the_linformer_package(target, dtype, tol):
    """lucidrains' linformer (LinformerSelfAttention) in float64, its own
    projections: attnc's low-rank op on its q, k, v with E = proj_kᵀ and
    F = proj_vᵀ (one projection shared by the heads: share = headwise; the
    same d_head^-1/2 scale; both slice E to the first N columns). The
    outputs and the gradients of x, proj_k and proj_v agree."""
    linformer = pytest.importorskip("linformer")
    torch.manual_seed(5)
    b, n, h, dh, k, seq = 2, 77, 3, 32, 16, 96
    m = linformer.LinformerSelfAttention(dim=h * dh, seq_len=seq, k=k, heads=h).double()
    f = attnc.attention("attention lin {\n  kv lowrank(k = 16, share = headwise)\n}\n",
                        target=target)
    x = torch.randn(b, n, h * dh, dtype=torch.float64, requires_grad=True)

    def through_attnc(x):
        split = lambda t: t.reshape(b, n, h, dh).transpose(1, 2).to(dtype)
        q, kk, v = split(m.to_q(x)), split(m.to_k(x)), split(m.to_v(x))
        out = f(q, kk, v, E=m.proj_k.t().float(), F=m.proj_v.t().float())
        return m.to_out(out.double().transpose(1, 2).reshape(b, n, h * dh))

    want, got = m(x), through_attnc(x)
    assert (got - want).abs().max() / want.abs().max() < tol
    g = torch.randn_like(want)
    params = (x, m.proj_k, m.proj_v)
    grads_want = torch.autograd.grad(want, params, g)
    grads_got = torch.autograd.grad(got, params, g)
    for a, w in zip(grads_got, grads_want):
        assert (a - w).abs().max() / w.abs().max() < tol


def test_torch_func_grad_vmap_and_jacrev():
    """torch.func over the op: grad equals autograd's, vmap equals a loop
    (folded into the batch when only q, k, v are mapped; a call per index
    when a parameter is), per-sample gradients of a learned slope equal
    one-at-a-time gradients, and jacrev's rows are vjps."""
    torch.manual_seed(6)
    f = attnc.attention(ALIBI)
    q, k, v = (torch.randn(2, 3, 13, 16) for _ in range(3))
    loss = lambda q, k, v: f(q, k, v).square().sum()
    qa = q.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(loss(qa, k, v), qa)
    assert torch.equal(torch.func.grad(loss)(q, k, v), want)

    Q, K, V = (torch.randn(4, 2, 3, 13, 16) for _ in range(3))
    looped = torch.stack([f(Q[i], K[i], V[i]) for i in range(4)])
    assert torch.equal(torch.func.vmap(f)(Q, K, V), looped)
    by_q = torch.stack([f(Q[i], k, v) for i in range(4)])
    assert torch.equal(torch.func.vmap(f, in_dims=(0, None, None))(Q, k, v), by_q)
    assert torch.equal(torch.func.vmap(f, in_dims=(2, None, None))(Q.movedim(0, 2), k, v), by_q)
    slopes = torch.rand(4, 3)
    by_slope = torch.func.vmap(lambda s: f(q, k, v, slope=s))(slopes)
    assert torch.equal(by_slope, torch.stack([f(q, k, v, slope=s) for s in slopes]))

    per_sample = torch.func.vmap(torch.func.grad(lambda s, q: f(q, k, v, slope=s).square().sum()),
                                 in_dims=(None, 0))(slopes[0], Q)
    for i in range(4):
        s = slopes[0].clone().requires_grad_(True)
        (g,) = torch.autograd.grad(f(Q[i], k, v, slope=s).square().sum(), s)
        assert torch.allclose(per_sample[i], g, rtol=1e-6, atol=0), (per_sample[i], g)

    small = [t[:1, :1, :5, :4].contiguous() for t in (q, k, v)]
    jac = torch.func.jacrev(lambda q: f(q, *small[1:]))(small[0])  # [out..., q...]
    qa = small[0].clone().requires_grad_(True)
    out = f(qa, *small[1:])
    for idx in [(0, 0, 0, 0), (0, 0, 3, 2), (0, 0, 4, 3)]:
        (row,) = torch.autograd.grad(out[idx], qa, retain_graph=True)
        assert torch.allclose(jac[idx], row, rtol=1e-6, atol=1e-7)


def test_double_backward_is_refused():
    """The op has no double backward: a second differentiation raises
    instead of returning a silently wrong (zero) second derivative."""
    f = attnc.attention(CAUSAL)
    q, k, v = (torch.randn(1, 2, 9, 16, requires_grad=True) for _ in range(3))
    w = torch.randn(1, 2, 9, 16, requires_grad=True)
    (g,) = torch.autograd.grad((f(q, k, v) * w).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        g.sum().backward()
    (g,) = torch.autograd.grad(f(q, k, v).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        g.sum().backward()


@pytest.mark.parametrize("target", [pytest.param(None, id="cpu"),
                                    pytest.param("cuda-sim", id="emulator")])
def test_lsh_matches_the_reformer_package(target):
    """lucidrains' reformer_pytorch (LSHAttention) in float64 as a peer, in
    the configuration where its semantics are attnc's:
      - the same rotations: it draws them with torch.randn inside the call,
        so the same seed and shape give attnc's lsh_rotations;
      - the same scale: it scores q·k̂ / sqrt(d), attnc q·k̂, so it gets
        sqrt(d)·q (hashes and k̂ do not change under scaling);
      - chunks of its bucket_size, N / bucket_size buckets, one chunk of
        look-back, no duplicate correction (its defaults).
    What cannot be switched off in the peer: its look-back wraps around (a
    round's first sorted chunk looks at the previous round's last chunk,
    the very first at the last round's), where attnc's first chunk looks
    back at nothing. So queries in any round's first sorted chunk are left
    out of the comparison, and the cotangent is zero there. Its self score
    is -5e4 where attnc's is -1e5: the same weights whenever a query has
    another key, and the same output when it has none. Both non-causal and
    causal; outputs and the gradients of q (through the normalised keys)
    and v agree."""
    reformer = pytest.importorskip("reformer_pytorch.reformer_pytorch")
    B, H, N, D, R, bucket = 2, 1, 256, 32, 2, 32
    nb = N // bucket
    for causal in (False, True):
        torch.manual_seed(20 + causal)
        f = attnc.attention("attention l {\n  qk shared\n"
                            f"  bucket lsh(buckets = {nb}, rounds = {R}, chunk = {bucket}, "
                            "before = 1)\n" + ("  mask causal\n" if causal else "") + "}\n",
                            target=target)
        q = torch.randn(B, H, N, D, dtype=torch.float64)
        v = torch.randn(B, H, N, D, dtype=torch.float64)
        peer = reformer.LSHAttention(bucket_size=bucket, n_hashes=R, causal=causal).eval()
        torch.manual_seed(123)
        rot = torch.randn((1, D, R, nb // 2), dtype=torch.float64)  # the peer's draw
        torch.manual_seed(123)
        qk = (q * D ** 0.5).reshape(B * H, N, D).requires_grad_(True)
        vp = v.reshape(B * H, N, D).requires_grad_(True)
        want, _, buckets = peer(qk, vp)
        rotations = rot[0].permute(1, 0, 2).float().contiguous()  # [R, D, nb/2]
        qa, va = q.float().requires_grad_(True), v.float().requires_grad_(True)
        got = f(qa, qa, va, lsh_rotations=rotations).double().reshape(B * H, N, D)

        # attnc hashes in f32 what the peer hashed in f64: the same buckets.
        theirs = buckets.reshape(B * H, R, N) - (torch.arange(R) * nb)[None, :, None]
        rotated = torch.einsum("btf,rfi->brti", qa.detach().reshape(B * H, N, D), rotations)
        assert torch.equal(theirs, torch.cat([rotated, -rotated], -1).argmax(-1))
        keep = torch.ones(B * H, N, dtype=torch.bool)
        for b in range(B * H):
            for r in range(R):  # stable sort by bucket: the round's first chunk
                first = torch.argsort(theirs[b, r] * N + torch.arange(N))[:bucket]
                keep[b, first] = False
        assert keep.sum() > N  # most queries are compared
        err = (got - want).abs().max(-1).values
        assert err[keep].max() / want.abs().max() < 1e-5
        assert err[~keep].max() > 1e-2  # the wrap-around does matter there
        g = torch.randn(B * H, N, D, dtype=torch.float64) * keep[..., None]
        dqk, dv = torch.autograd.grad(want, (qk, vp), g)
        dq_got, dv_got = torch.autograd.grad(got, (qa, va), g)
        for a, w in ((dq_got, dqk * D ** 0.5), (dv_got, dv)):
            a = a.double().reshape(B * H, N, D)
            assert (a - w).abs().max() / w.abs().max() < 1e-5


def test_gradcheck_float64_inputs():
    """torch.autograd.gradcheck on float64 tensors, small cases: causal,
    a learned per-head slope (its gradient too), and low-rank with E and F.
    attnc's CPU kernels compute in fp32 (float64 tensors are converted), so
    the finite differences use eps = 1e-2 (measured: their error is 1.5e-5
    there, 2e-4 at eps = 1e-3) and atol 1e-4, rtol 1e-3
    (at gradcheck's default eps = 1e-6 the differences would measure fp32
    rounding, not the derivative). A wrong backward is off by O(1)."""
    torch.manual_seed(30)
    opts = dict(eps=1e-2, atol=1e-4, rtol=1e-3, nondet_tol=0.0)
    shape = (1, 2, 9, 8)
    q, k, v = (torch.randn(*shape, dtype=torch.float64, requires_grad=True) for _ in range(3))
    f = attnc.attention(CAUSAL)
    assert torch.autograd.gradcheck(lambda q, k, v: f(q, k, v), (q, k, v), **opts)
    alibi = attnc.attention(ALIBI)
    slope = torch.tensor([0.5, 0.25], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v, s: alibi(q, k, v, slope=s),
                                    (q, k, v, slope), **opts)
    lin = attnc.attention("attention lin {\n  kv lowrank(k = 4, share = headwise)\n}\n")
    E, Fp = ((torch.randn(4, 12, dtype=torch.float64) / 12 ** 0.5).requires_grad_(True)
             for _ in range(2))
    assert torch.autograd.gradcheck(lambda q, k, v, E, Fp: lin(q, k, v, E=E, F=Fp),
                                    (q, k, v, E, Fp), **opts)
