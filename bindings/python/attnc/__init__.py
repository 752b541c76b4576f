"""attnc from Python: compile an attention variant of a .attn spec, run it.

The core needs no torch: it runs on numpy arrays (or anything numpy can
take through DLPack) on the CPU, through libattnc.so's C ABI; with torch,
`attnc.attention` is an op on CPU and CUDA tensors (attnc/_torch.py), over
the same ABI
(bindings/c/include/attnc/attnc.h). docs/pytorch.md says what exists and
what does not yet.

    import attnc, numpy as np
    v = attnc.Variant("attention a {\\n  mask causal\\n}\\n", heads=3, head_dim=64)
    out, lse = v.forward(q, k, v_)            # [B, H, N, D] float32 arrays
    dq, dk, dv, dparams = v.backward(q, k, v_, out, lse, dout)
"""
import ctypes
from typing import List, NamedTuple, Optional, Sequence, Tuple

from . import _capi

__all__ = ["AttncError", "ParamSpec", "Variant", "attention", "library_path", "view"]

_lib = None


def _library():
    global _lib
    if _lib is None:
        _lib = _capi.load()
    return _lib


def library_path() -> str:
    """The libattnc.so this package runs on."""
    return _library().path


class AttncError(RuntimeError):
    """An error attnc returned: a malformed spec (with its line and column),
    a tensor of the wrong shape, dtype or layout (named), a bad option."""


def _check(err):
    if err:
        lib = _library()
        message = lib.attnc_error_message(err).decode()
        lib.attnc_error_free(err)
        raise AttncError(message)


class ParamSpec(NamedTuple):
    """A tensor a variant takes after q, k, v."""
    name: str            # "E", "F", "lsh_rotations", or a per-head parameter
    shape: Tuple[int, ...]
    learned: bool        # has a gradient


_DTYPES = {"float32": _capi.F32, "float16": _capi.F16, "bfloat16": _capi.BF16,
           "int32": _capi.I32}
_DTYPE_NAMES = {code: name for name, code in _DTYPES.items()}


def _numpy():
    try:
        import numpy
    except ImportError as e:  # the core's arrays are numpy's
        raise ImportError("attnc's array interface needs numpy (pip install numpy)") from e
    return numpy


def _as_array(x):
    """A numpy array viewing `x` (numpy, or any DLPack producer), no copy."""
    np = _numpy()
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        return np.from_dlpack(x)
    raise TypeError(f"expected a numpy array or a DLPack tensor, got {type(x).__name__}")


def view(ptr: int, dtype: str, shape: Sequence[int], strides: Sequence[int],
         device: int = _capi.CPU) -> _capi.Tensor:
    """An attnc_tensor over caller-owned memory (strides in elements)."""
    if len(shape) > 4:
        raise ValueError(f"attnc tensors have at most 4 dimensions, got shape {tuple(shape)}")
    if dtype not in _DTYPES:
        raise TypeError(f"dtype {dtype}: attnc takes float32, float16, bfloat16 or int32")
    t = _capi.Tensor()
    t.data, t.dtype, t.device, t.ndim = ptr, _DTYPES[dtype], device, len(shape)
    for i, (n, s) in enumerate(zip(shape, strides)):
        t.shape[i], t.strides[i] = n, s
    return t


def _array_view(a) -> _capi.Tensor:
    item = a.dtype.itemsize
    if any(s % item for s in a.strides):
        raise ValueError(f"strides {a.strides} are not whole elements")
    return view(a.__array_interface__["data"][0], a.dtype.name, a.shape,
                [s // item for s in a.strides])


def _tensor_array(views: List[_capi.Tensor]):
    arr = (_capi.Tensor * max(len(views), 1))()
    for i, t in enumerate(views):
        arr[i] = t
    return arr


def _artifact_dtype(path: str, name: Optional[str]) -> Optional[str]:
    """The kernels' dtype when `path` is an artifact directory (what
    `attnc compile SPEC -o DIR` writes), else None."""
    import json
    import os
    manifest = os.path.join(str(path), "manifest.json")
    if not os.path.isfile(manifest):
        return None
    with open(manifest) as f:
        kernels = [k for k in json.load(f).get("kernels", []) if not k.get("backward")]
    for k in kernels:
        if name in (None, k.get("name"), k.get("function")):
            return {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}.get(k.get("dtype"))
    return "float32"  # attnc_load names what is missing


class Variant:
    """One compiled attention variant (a handle to its kernels).

    `spec` is a .attn file's path or its text; `name` picks the variant
    when the spec has several. `spec` may also be an artifact directory
    that `attnc compile SPEC -o DIR` wrote: its kernels are loaded
    (attnc_load; `name` is a kernel's or its function's name, dtype and
    max_seq are the artifact's), which needs only the runtime, so a
    libattnc built without the compiler runs it. Compiling goes into attnc's kernel cache
    (the command line's): the same variant at the same heads, head dim and
    options loads from there the next time (`from_cache`). The kernels do
    not depend on the batch or N (low-rank: N up to `max_seq`).

    `target`: "cpu" (fp32 kernels), "cuda" (kernels of `dtype` on GPU
    `device`, -1: the process's; `arch` None: the GPU's own) or
    "cuda-sim" (the CUDA kernels on the SIMT emulator, on host memory, at
    the tiles of `arch`, default sm_80). `tensor_dtype` is the dtype calls
    may pass besides float32.
    """

    def __init__(self, spec: str, name: Optional[str] = None, *, heads: int, head_dim: int,
                 max_seq: int = 0, key_padding: bool = False, backward: bool = True,
                 target: str = "cpu", dtype: Optional[str] = None, device: int = -1,
                 arch: Optional[str] = None):
        lib = _library()
        opts = _capi.CompileOptions()
        lib.attnc_compile_options_init(ctypes.byref(opts))
        artifact = _artifact_dtype(spec, name)
        dtype = dtype or artifact or "float32"
        if dtype not in _DTYPES or dtype == "int32":
            raise AttncError(f"dtype {dtype}: the kernels are float32, float16 or bfloat16")
        opts.target = target.encode()
        opts.dtype, opts.device = _DTYPES[dtype], device
        opts.arch = arch.encode() if arch else None
        opts.heads, opts.head_dim, opts.max_seq = heads, head_dim, max_seq
        opts.key_padding, opts.backward = int(key_padding), int(backward)
        handle = ctypes.c_void_p()
        make = lib.attnc_load if artifact else lib.attnc_compile
        _check(make(str(spec).encode(), name.encode() if name else None, ctypes.byref(opts),
                    ctypes.byref(handle)))
        self._handle = handle
        self.heads, self.head_dim, self.max_seq = heads, head_dim, max_seq
        self.target, self.dtype = target, dtype
        self.tensor_dtype = _DTYPE_NAMES[lib.attnc_variant_tensor_dtype(handle)]
        self.name = lib.attnc_variant_name(handle).decode()
        self.shared_qk = bool(lib.attnc_variant_shared_qk(handle))
        self.from_cache = bool(lib.attnc_variant_from_cache(handle))
        bq, bkv = ctypes.c_int64(), ctypes.c_int64()
        lib.attnc_variant_tile(handle, ctypes.byref(bq), ctypes.byref(bkv))
        self.tile = (bq.value, bkv.value)  # the forward kernel's (query rows, key columns)
        self.params: List[ParamSpec] = []
        for i in range(lib.attnc_variant_num_params(handle)):
            info = _capi.ParamInfo()
            _check(lib.attnc_variant_param(handle, i, ctypes.byref(info)))
            self.params.append(ParamSpec(info.name.decode(),
                                         tuple(info.shape[d] for d in range(info.ndim)),
                                         bool(info.learned)))

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle and _lib is not None:
            _lib.attnc_variant_free(handle)
            self._handle = None

    def __repr__(self):
        return (f"attnc.Variant({self.name!r}, heads={self.heads}, head_dim={self.head_dim}, "
                f"params={[p.name for p in self.params]})")

    # ---- on raw views (the torch op calls these) -------------------------

    def call_forward(self, q, k, v, out, lse, params=(), lengths=None, allow_copies=False,
                     stream=None):
        """attnc_forward on attnc_tensor views (see `view`)."""
        c = self._call(q, k, v, out, lse, params, lengths, allow_copies, stream)
        _check(_library().attnc_forward(self._handle, ctypes.byref(c)))

    def call_backward(self, q, k, v, out, lse, dout, dq, dk, dv, dparams=(), params=(),
                      lengths=None, allow_copies=False, stream=None):
        """attnc_backward on attnc_tensor views; a None in dparams is skipped."""
        c = self._call(q, k, v, out, lse, params, lengths, allow_copies, stream)
        c.dout, c.dq, c.dk, c.dv = dout, dq, dk, dv
        dp = _tensor_array([t if t is not None else _capi.Tensor() for t in dparams])
        c.dparams = ctypes.cast(dp, ctypes.POINTER(_capi.Tensor))
        c._keep.append(dp)
        _check(_library().attnc_backward(self._handle, ctypes.byref(c)))

    def _call(self, q, k, v, out, lse, params, lengths, allow_copies, stream):
        if len(params) != len(self.params):
            raise AttncError(f"{self.name} takes {len(self.params)} parameter tensor(s) "
                             f"({', '.join(p.name for p in self.params) or 'none'}), "
                             f"got {len(params)}")
        c = _capi.Call()
        c.struct_size = ctypes.sizeof(_capi.Call)
        c.q, c.k, c.v, c.out, c.lse = q, k, v, out, lse
        c.allow_copies = int(allow_copies)
        c.stream = stream
        c._keep = []
        p = _tensor_array(list(params))
        c.params = ctypes.cast(p, ctypes.POINTER(_capi.Tensor))
        c._keep.append(p)
        if lengths is not None:
            c.lengths = ctypes.pointer(lengths)
            c._keep.append(lengths)
        return c

    # ---- on numpy arrays -------------------------------------------------

    def init_params(self, seed: int = 0):
        """Each parameter's initial value (E, F: Xavier-normal from `seed`;
        LSH rotations from the spec's seed; per-head: the spec's init)."""
        np = _numpy()
        values = []
        for i, p in enumerate(self.params):
            a = np.zeros(p.shape, dtype=np.float32)
            t = _array_view(a)
            _check(_library().attnc_variant_init_param(self._handle, i, seed, ctypes.byref(t)))
            values.append(a)
        return values

    def forward(self, q, k, v, params=(), lengths=None, allow_copies=False):
        """out [B, H, N, D] and lse [B, H, N] as float32 numpy arrays."""
        np = _numpy()
        q, k, v = _as_array(q), _as_array(k), _as_array(v)
        arrays = [_as_array(p) for p in params]
        out = np.empty(q.shape, dtype=np.float32)
        lse = np.empty(q.shape[:3], dtype=np.float32)
        self.call_forward(_array_view(q), _array_view(k), _array_view(v), _array_view(out),
                          _array_view(lse), [_array_view(a) for a in arrays],
                          None if lengths is None else _array_view(_as_array(lengths)),
                          allow_copies)
        return out, lse

    def backward(self, q, k, v, out, lse, dout, params=(), lengths=None, allow_copies=False):
        """dq, dk, dv and the learned parameters' gradients (None for the others)."""
        np = _numpy()
        q, k, v = _as_array(q), _as_array(k), _as_array(v)
        out, lse, dout = _as_array(out), _as_array(lse), _as_array(dout)
        arrays = [_as_array(p) for p in params]
        dq = np.zeros(q.shape, dtype=np.float32)
        dk = np.zeros(k.shape, dtype=np.float32)
        dv = np.zeros(v.shape, dtype=np.float32)
        dparams = [np.zeros(p.shape, dtype=np.float32) if p.learned else None
                   for p in self.params]
        self.call_backward(_array_view(q), _array_view(k), _array_view(v), _array_view(out),
                           _array_view(lse), _array_view(dout), _array_view(dq),
                           _array_view(dk), _array_view(dv),
                           [None if d is None else _array_view(d) for d in dparams],
                           [_array_view(a) for a in arrays],
                           None if lengths is None else _array_view(_as_array(lengths)),
                           allow_copies)
        return dq, dk, dv, dparams


def attention(spec: str, name: Optional[str] = None, *, allow_copies: bool = True,
              target: Optional[str] = None):
    """Variant `name` of `spec` (a path or the spec's text) as a PyTorch op:
    f(q, k, v, *, lengths=None, return_lse=False, **weights). Needs torch.
    `target` None runs where the tensors are (CPU or CUDA); "cuda-sim"
    runs CPU tensors through the CUDA kernels on the SIMT emulator."""
    from ._torch import attention as make
    return make(spec, name, allow_copies=allow_copies, target=target)


def __getattr__(name):
    if name == "nn":  # attnc.nn needs torch: imported on first use
        import importlib
        return importlib.import_module(".nn", __name__)
    raise AttributeError(f"module 'attnc' has no attribute {name!r}")
