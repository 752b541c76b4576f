"""ctypes mirror of bindings/c/include/attnc/attnc.h (ATTNC_C_API_VERSION 3).

Kept field for field in the header's order; the library checks each
struct's struct_size, and attnc_api_version() says which ABI it speaks.
"""
import ctypes
import os
import pathlib

API_VERSION = 3

F32, F16, BF16, I32 = 0, 1, 2, 3
CPU, CUDA = 0, 1


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("device", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
    ]


class CompileOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("target", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("max_seq", ctypes.c_int64),
        ("key_padding", ctypes.c_int),
        ("backward", ctypes.c_int),
        ("arch", ctypes.c_char_p),
        ("device", ctypes.c_int),
    ]


class ParamInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * 4),
        ("learned", ctypes.c_int),
    ]


class Call(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("lengths", ctypes.POINTER(Tensor)),
        ("params", ctypes.POINTER(Tensor)),
        ("out", Tensor),
        ("lse", Tensor),
        ("stream", ctypes.c_void_p),
        ("allow_copies", ctypes.c_int),
        ("dout", Tensor),
        ("dq", Tensor),
        ("dk", Tensor),
        ("dv", Tensor),
        ("dparams", ctypes.POINTER(Tensor)),
    ]


def _candidates():
    env = os.environ.get("ATTNC_LIBRARY")
    if env:
        yield pathlib.Path(env)
    here = pathlib.Path(__file__).resolve().parent
    yield here / "lib" / "libattnc.so"          # an installed wheel
    for up in here.parents:                     # the source tree's build/
        yield up / "build" / "lib" / "libattnc.so"


def load():
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.is_file():
            lib = ctypes.CDLL(str(path))
            _declare(lib)
            if lib.attnc_api_version() != API_VERSION:
                raise ImportError(f"{path} speaks attnc C ABI {lib.attnc_api_version()}, "
                                  f"this package {API_VERSION}: reinstall attnc")
            lib.path = str(path)
            return lib
    raise ImportError("libattnc.so not found (looked at: " + ", ".join(tried) +
                      "); pip install attnc, or set ATTNC_LIBRARY")


def _declare(lib):
    E = ctypes.c_void_p  # attnc_error *
    V = ctypes.c_void_p  # attnc_variant *
    sig = {
        "attnc_api_version": ([], ctypes.c_int),
        "attnc_error_message": ([E], ctypes.c_char_p),
        "attnc_error_free": ([E], None),
        "attnc_compile_options_init": ([ctypes.POINTER(CompileOptions)], None),
        "attnc_compile": ([ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(CompileOptions),
                           ctypes.POINTER(V)], E),
        "attnc_load": ([ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(CompileOptions),
                        ctypes.POINTER(V)], E),
        "attnc_variant_free": ([V], None),
        "attnc_variant_name": ([V], ctypes.c_char_p),
        "attnc_variant_shared_qk": ([V], ctypes.c_int),
        "attnc_variant_from_cache": ([V], ctypes.c_int),
        "attnc_variant_tile": ([V, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)],
                               None),
        "attnc_variant_tensor_dtype": ([V], ctypes.c_int),
        "attnc_variant_num_params": ([V], ctypes.c_int),
        "attnc_variant_param": ([V, ctypes.c_int, ctypes.POINTER(ParamInfo)], E),
        "attnc_variant_init_param": ([V, ctypes.c_int, ctypes.c_uint64,
                                      ctypes.POINTER(Tensor)], E),
        "attnc_forward": ([V, ctypes.POINTER(Call)], E),
        "attnc_backward": ([V, ctypes.POINTER(Call)], E),
    }
    for name, (args, res) in sig.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
