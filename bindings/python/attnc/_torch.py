"""attnc's attention as a PyTorch op (torch.library custom op).

`attnc.attention(spec)` returns f(q, k, v, *, lengths=None, return_lse=False,
**weights) on [B, H, N, D] tensors. Two custom ops, `attnc::attention` and
`attnc::attention_backward`, with fake kernels and vmap rules, joined by an
autograd.Function: autograd, torch.compile(fullgraph=True) and torch.func
(grad, vmap, jacrev) see through it.
Ops take no Python objects, so a compiled variant is named by a key into
this module's registry. docs/pytorch.md says what runs where.
"""
import threading
from typing import Dict, List, Optional, Tuple

import torch

from . import AttncError, Variant, _artifact_dtype, _capi, view

_registry: Dict[str, Variant] = {}
_lock = threading.Lock()


def _variant(spec: str, name: Optional[str], heads: int, head_dim: int, max_seq: int,
             key_padding: bool, target: str = "cpu", dtype: Optional[str] = "float32",
             device: int = -1) -> Tuple[str, Variant]:
    key = repr((spec, name, heads, head_dim, max_seq, key_padding, target, dtype, device))
    with _lock:
        var = _registry.get(key)
        if var is None:
            var = Variant(spec, name, heads=heads, head_dim=head_dim, max_seq=max_seq,
                          key_padding=key_padding, target=target, dtype=dtype, device=device)
            _registry[key] = var
    return key, var


_DTYPE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
          torch.int32: "int32"}
_TORCH_DTYPE = {name: dtype for dtype, name in _DTYPE.items()}


def _view(t: torch.Tensor):
    if t.dtype not in _DTYPE:
        raise AttncError(f"a {t.dtype} tensor: attnc takes float32, float16, bfloat16, int32")
    return view(t.data_ptr(), _DTYPE[t.dtype], tuple(t.shape), t.stride(),
                _capi.CUDA if t.is_cuda else _capi.CPU)


def _io_dtype(var: Variant, t: torch.Tensor) -> torch.dtype:
    """The dtype the kernels' call takes `t` in: its own when the variant
    reads it in place (a CUDA variant of that dtype), else float32 (the
    CPU kernels; low-rank CUDA kernels, whose projections run in f32)."""
    return t.dtype if _DTYPE.get(t.dtype) == var.tensor_dtype else torch.float32


def _operand(var: Variant, name: str, t: torch.Tensor, dtype: torch.dtype,
             allow_copies: bool) -> torch.Tensor:
    """`t` as the kernels take it: in `dtype` (a conversion is a copy) and,
    for the CUDA kernels, contiguous and 16-byte aligned. Those copies run
    on the current stream, and only with allow_copies. The C ABI checks
    the rest (shape, device, the CPU target's own copies)."""
    if t.dtype != dtype:
        t = t.to(dtype)
    if var.target != "cpu" and (not t.is_contiguous() or t.data_ptr() % 16):
        if not allow_copies:
            raise AttncError(
                f"{name} (shape {tuple(t.shape)}, strides {t.stride()}, address % 16 = "
                f"{t.data_ptr() % 16}): the CUDA kernels read contiguous, 16-byte aligned "
                "tensors; pass one, or allow_copies=True")
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def _stream(t: torch.Tensor):
    """The caller's current CUDA stream for `t`'s device (None on the CPU):
    the kernels are enqueued there, and nothing waits for them."""
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else None


def _check_device(var: Variant, q: torch.Tensor):
    if var.target == "cuda" and not q.is_cuda:
        raise AttncError(f"{var.name} was compiled for CUDA; q is on {q.device}")
    if var.target != "cuda" and q.is_cuda:
        raise AttncError(f"{var.name} was compiled for {var.target}; q is on {q.device}")


@torch.library.custom_op("attnc::attention", mutates_args=())
def attention_op(key: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 params: List[torch.Tensor], lengths: Optional[torch.Tensor],
                 allow_copies: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    var = _registry[key]
    _check_device(var, q)
    io = _io_dtype(var, q)
    qi, ki, vi = (_operand(var, n, t, io, allow_copies) for n, t in (("q", q), ("k", k), ("v", v)))
    ps = [_operand(var, s.name, p, torch.float32, allow_copies) for p, s in zip(params, var.params)]
    out = torch.empty(q.shape, dtype=io, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    var.call_forward(_view(qi), _view(ki), _view(vi), _view(out), _view(lse),
                     [_view(p) for p in ps], None if lengths is None else _view(lengths),
                     allow_copies, _stream(q))
    return out.to(q.dtype), lse


@attention_op.register_fake
def _(key, q, k, v, params, lengths, allow_copies):
    return torch.empty_like(q, memory_format=torch.contiguous_format), \
        q.new_empty(q.shape[:3], dtype=torch.float32)


@torch.library.custom_op("attnc::attention_backward", mutates_args=())
def attention_backward_op(key: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          params: List[torch.Tensor], lengths: Optional[torch.Tensor],
                          out: torch.Tensor, lse: torch.Tensor, dout: torch.Tensor,
                          allow_copies: bool) -> List[torch.Tensor]:
    var = _registry[key]
    _check_device(var, q)
    io = _io_dtype(var, q)
    qi, ki, vi, oi, doi = (_operand(var, n, t, io, allow_copies) for n, t in
                           (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)))
    ps = [_operand(var, s.name, p, torch.float32, allow_copies) for p, s in zip(params, var.params)]
    # Zeros: a shared-QK variant leaves dk as it is (its key path is in dq).
    dq, dk, dv = (torch.zeros(t.shape, dtype=io, device=q.device) for t in (q, k, v))
    dparams = [torch.zeros(p.shape, dtype=torch.float32, device=q.device) for p in params]
    var.call_backward(_view(qi), _view(ki), _view(vi), _view(oi), _view(lse), _view(doi),
                      _view(dq), _view(dk), _view(dv),
                      [_view(d) if spec.learned else None
                       for d, spec in zip(dparams, var.params)],
                      [_view(p) for p in ps], None if lengths is None else _view(lengths),
                      allow_copies, _stream(q))
    return [dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)] + \
        [d.to(p.dtype) for d, p in zip(dparams, params)]


@attention_backward_op.register_fake
def _(key, q, k, v, params, lengths, out, lse, dout, allow_copies):
    return [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)] + \
        [torch.empty_like(p) for p in params]


class _Attention(torch.autograd.Function):
    """The op's autograd, as an autograd.Function with setup_context.

    register_autograd would be the natural place, but torch's generated
    wrapper for it refuses torch.func transforms (pytorch#168393, open in
    torch 2.15): "it must override the setup_context staticmethod". This
    Function calls the same two ops; torch.compile traces through it to
    them, and torch.func gets its vmap rule from theirs
    (generate_vmap_rule: the ops' register_vmap rules below).
    """
    generate_vmap_rule = True

    @staticmethod
    def forward(key, allow_copies, lengths, q, k, v, *params):
        return attention_op(key, q, k, v, list(params), lengths, allow_copies)

    @staticmethod
    def setup_context(ctx, inputs, output):
        key, allow_copies, lengths, q, k, v, *params = inputs
        out, lse = output
        ctx.mark_non_differentiable(lse)  # the kernels take no gradient of lse
        ctx.key, ctx.allow_copies = key, allow_copies
        ctx.num_params, ctx.has_lengths = len(params), lengths is not None
        ctx.save_for_backward(q, k, v, out, lse, *params,
                              *([lengths] if lengths is not None else []))

    @staticmethod
    @torch.autograd.function.once_differentiable  # no double backward: the op has none
    def backward(ctx, dout, dlse):
        saved = ctx.saved_tensors
        q, k, v, out, lse = saved[:5]
        params = list(saved[5:5 + ctx.num_params])
        lengths = saved[5 + ctx.num_params] if ctx.has_lengths else None
        grads = attention_backward_op(ctx.key, q, k, v, params, lengths, out, lse, dout,
                                      ctx.allow_copies)
        return (None, None, None, *grads)


def _vmapped(info, lead, lead_dims, params, param_dims, call, fold):
    """The outputs of `call(lead, params)` under vmap, each batched at dim 0.

    `lead` are the tensors whose dim 0 is the batch B (None allowed),
    `params` the variant's parameter tensors. With `fold`, the vmapped
    dim folds into B: one kernel call over V * B. Otherwise (a parameter
    is batched, or the per-index parameter gradients must stay apart) one
    call per vmapped index, stacked.
    """
    size = info.batch_size
    lead = [None if t is None else t.movedim(d, 0) if d is not None else t.expand(size, *t.shape)
            for t, d in zip(lead, lead_dims)]
    if fold:
        outs = call([None if t is None else t.reshape(-1, *t.shape[2:]) for t in lead], params)
        outs = [o.reshape(size, -1, *o.shape[1:]) for o in outs]
    else:
        params = [p.movedim(d, 0) if d is not None else p for p, d in zip(params, param_dims)]
        per_index = [call([None if t is None else t[i] for t in lead],
                          [p[i] if d is not None else p for p, d in zip(params, param_dims)])
                     for i in range(size)]
        outs = [torch.stack(r) for r in zip(*per_index)]
    return outs, [0] * len(outs)


@attention_op.register_vmap
def _(info, in_dims, key, q, k, v, params, lengths, allow_copies):
    _, qd, kd, vd, pd, ld, _ = in_dims

    def call(lead, params):
        q, k, v, lengths = lead
        return attention_op(key, q, k, v, params, lengths, allow_copies)

    outs, dims = _vmapped(info, [q, k, v, lengths], [qd, kd, vd, ld], params, pd, call,
                          fold=all(d is None for d in pd))
    return tuple(outs), tuple(dims)


@attention_backward_op.register_vmap
def _(info, in_dims, key, q, k, v, params, lengths, out, lse, dout, allow_copies):
    _, qd, kd, vd, pd, ld, od, sd, dd, _ = in_dims

    def call(lead, params):
        q, k, v, lengths, out, lse, dout = lead
        return attention_backward_op(key, q, k, v, params, lengths, out, lse, dout, allow_copies)

    # Parameter gradients sum over B, so each vmapped index needs its own call.
    return _vmapped(info, [q, k, v, lengths, out, lse, dout], [qd, kd, vd, ld, od, sd, dd],
                    params, pd, call, fold=not params)


_defaults: Dict[str, List[torch.Tensor]] = {}  # key -> each parameter's initial value


@torch.compiler.assume_constant_result
def _compiled(spec: str, name: Optional[str], heads: int, head_dim: int, max_seq: int,
              key_padding: bool, target: str, dtype: Optional[str], device: int) -> str:
    """The registry key of the variant for this shape class and device,
    compiling it (and its parameters' initial values) on first use.
    torch.compile runs it while tracing and keeps the key as a constant,
    so the traced graph holds only the op."""
    key, var = _variant(spec, name, heads, head_dim, max_seq, key_padding, target, dtype, device)
    if key not in _defaults:
        _defaults[key] = [torch.from_numpy(v) for v in var.init_params()]
    return key


class Attention:
    """f(q, k, v, *, lengths=None, return_lse=False, **weights) for one variant.

    Compiles on the first call for the tensors' heads, head dim, device
    and (CUDA) dtype, and for low-rank variants E's columns; later calls
    with the same reuse the kernels, whatever the batch or N. `weights`
    name the variant's parameter tensors (E, F, per-head values); those
    not given take attnc's initial values and are then constants
    (attnc.nn.Attention holds them as parameters instead). CPU tensors run
    on the CPU kernels, or with `target="cuda-sim"` on the CUDA kernels
    under the SIMT emulator (slow; for checking the CUDA path without a
    GPU); CUDA tensors on the CUDA kernels, on the current stream.
    """

    def __init__(self, spec: str, name: Optional[str] = None, *, allow_copies: bool = True,
                 target: Optional[str] = None):
        if target not in (None, "cpu", "cuda", "cuda-sim"):
            raise AttncError(f"target {target!r}: expected None (the tensors' device), "
                             "'cpu', 'cuda' or 'cuda-sim'")
        self.spec, self.name, self.allow_copies, self.target = spec, name, allow_copies, target
        self.artifact = _artifact_dtype(spec, name) is not None

    def _target(self, q) -> Tuple[str, Optional[str], int]:
        """(target, kernel dtype, device ordinal) for tensors like q. An
        artifact's kernels have their own dtype (None: theirs)."""
        target = self.target or ("cuda" if q.is_cuda else "cpu")
        if target == "cpu":
            return "cpu", None if self.artifact else "float32", -1
        dtype = _DTYPE.get(q.dtype, "float32")
        if dtype == "int32" or self.artifact:
            dtype = None if self.artifact else "float32"
        return target, dtype, (q.device.index or 0) if q.is_cuda else -1

    def variant(self, heads: int, head_dim: int, max_seq: int = 0,
                key_padding: bool = False) -> Tuple[str, Variant]:
        """The variant on the CPU target (what its parameters are)."""
        return _variant(self.spec, self.name, heads, head_dim, max_seq, key_padding)

    def __call__(self, q, k, v, *, lengths=None, return_lse=False, **weights):
        if q.dim() != 4:
            raise AttncError(f"q of shape {tuple(q.shape)}: expected [B, H, N, D]")
        max_seq = int(weights["E"].shape[-1]) if "E" in weights else 0
        key = _compiled(self.spec, self.name, int(q.shape[1]), int(q.shape[3]), max_seq,
                        lengths is not None, *self._target(q))
        var = _registry[key]
        names = [p.name for p in var.params]
        if "E" in names and max_seq == 0:
            raise AttncError(f"{var.name} is low-rank: pass E (and F) as weights, "
                             "or use attnc.nn.Attention, which holds them")
        for w in weights:
            if w not in names:
                raise AttncError(f"{var.name} takes no weight {w!r}; it takes {names}")
        params = [weights[n] if n in weights else d.to(q.device)
                  for n, d in zip(names, _defaults[key])]
        if lengths is not None and lengths.dtype != torch.int32:
            lengths = lengths.to(torch.int32)
        out, lse = _Attention.apply(key, self.allow_copies, lengths, q, k, v, *params)
        return (out, lse) if return_lse else out


def attention(spec: str, name: Optional[str] = None, *, allow_copies: bool = True,
              target: Optional[str] = None) -> Attention:
    """The callable for variant `name` of `spec` (a path or the spec's text)."""
    return Attention(spec, name, allow_copies=allow_copies, target=target)
