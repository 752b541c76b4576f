/*===- attnc.h - attnc's C ABI: compiled attention on caller-owned buffers -===*
 *
 * Compile one attention variant of a .attn spec, ask which parameter
 * tensors it needs (low-rank E and F, LSH rotations, per-head parameters),
 * and run its forward and backward on buffers the caller owns. The Python
 * package (bindings/python/attnc) is built on it; any language with a C
 * FFI can be. Handles and buffers are the caller's: attnc allocates only
 * its own scratch. The model: FlashInfer's JIT and cuDNN's frontend (a
 * handle per compiled kernel, buffers owned by the caller).
 *
 * Errors come back as values: every call that can fail returns an
 * attnc_error* (NULL on success) whose message names the argument, the
 * tensor or the spec's line and column; free it with attnc_error_free.
 * Nothing prints, nothing exits.
 *
 * Threads: calls may come from any number of threads at once.
 *   - attnc_compile and attnc_load run concurrently, on the same spec or
 *     not: each compile has its own compiler state and keeps its own
 *     diagnostics (an error's message holds only its call's words); the
 *     kernel cache they share is locked across threads and processes.
 *   - On one handle, the attnc_variant_* queries, attnc_forward and
 *     attnc_backward may run concurrently. CPU calls run side by side
 *     (each call's scratch is its own); CUDA and cuda-sim calls on one
 *     handle take turns (its scratch is one); calls on different handles
 *     never wait for each other.
 *   - attnc_variant_free must not overlap any other call on that handle.
 *   - Results do not depend on what other threads do: a call gives the
 *     same bits alone or beside others (test/unit/bindings/CApiThreadsTest.cpp,
 *     also under ThreadSanitizer with scripts/tsan.sh).
 *
 * Stability: the structs a caller fills carry their size first
 * (struct_size = sizeof the struct it was compiled with), so fields can be
 * added at the end; functions are only added. ATTNC_C_API_VERSION counts
 * the additions.
 *
 * Targets:
 *   - "cpu": fp32 kernels on host pointers;
 *   - "cuda": f32, f16 or bf16 kernels on device pointers of one GPU, enqueued
 *     on the caller's CUstream (attnc_call.stream) with no host wait;
 *   - "cuda-sim": the same CUDA kernels on the SIMT emulator, on host
 *     pointers (what tests without a GPU run).
 *
 *===----------------------------------------------------------------------===*/
#ifndef ATTNC_ATTNC_H
#define ATTNC_ATTNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNC_C_API_VERSION 3

#if defined(__GNUC__)
#define ATTNC_API __attribute__((visibility("default")))
#else
#define ATTNC_API
#endif

/* The version of the library loaded (ATTNC_C_API_VERSION it was built with). */
ATTNC_API int attnc_api_version(void);

/* ---- errors ---------------------------------------------------------- */

typedef struct attnc_error attnc_error;
/* The message; valid until attnc_error_free. */
ATTNC_API const char *attnc_error_message(const attnc_error *error);
ATTNC_API void attnc_error_free(attnc_error *error);

/* ---- tensors --------------------------------------------------------- */

typedef enum { ATTNC_F32 = 0, ATTNC_F16 = 1, ATTNC_BF16 = 2, ATTNC_I32 = 3 } attnc_dtype;

typedef enum { ATTNC_CPU = 0, ATTNC_CUDA = 1 } attnc_device;

/* A view of caller-owned memory, as DLPack describes one: `strides` in
 * elements (not bytes), for every dimension. */
typedef struct {
  void *data;
  attnc_dtype dtype;
  attnc_device device;
  int ndim;
  int64_t shape[4];
  int64_t strides[4];
} attnc_tensor;

/* ---- compiling ------------------------------------------------------- */

typedef struct {
  size_t struct_size; /* sizeof(attnc_compile_options) */
  const char *target; /* "cpu" (NULL: "cpu") */
  attnc_dtype dtype;  /* the kernels' element type (CPU: ATTNC_F32) */
  int64_t heads;      /* H */
  int64_t head_dim;   /* D */
  int64_t max_seq;    /* low-rank: E and F's columns (the longest N); else 0 */
  int key_padding;    /* 1: calls may pass per-sequence key lengths */
  int backward;       /* 1: compile the backward too */
  /* Version 2: */
  const char *arch; /* cuda: NULL = the device's own ("sm_90"); cuda-sim: the arch
                       whose tiles and code path are emulated (NULL = "sm_80") */
  int device;       /* cuda: the GPU's ordinal; -1 = the process's (its local rank
                       under mpirun or srun, else 0) */
} attnc_compile_options;

/* Fills `options` with the defaults (CPU, f32, with the backward). */
ATTNC_API void attnc_compile_options_init(attnc_compile_options *options);

typedef struct attnc_variant attnc_variant;

/* Compiles attention variant `name` of `spec` (the spec's text, or a path
 * to a .attn file; `name` NULL: the spec's only variant) for `options`.
 * Kernels go into attnc's kernel cache ($ATTNC_CACHE_DIR, else
 * ~/.cache/attnc), the one the command line uses: a second compile of the
 * same variant and shape class loads them. The kernels do not depend on
 * the batch or the sequence length (up to max_seq for low-rank). */
ATTNC_API attnc_error *attnc_compile(const char *spec, const char *name,
                                     const attnc_compile_options *options, attnc_variant **variant);
/* Loads forward kernel `name` (its name or its function's; NULL: the first)
 * of an artifact that `attnc compile SPEC -o DIR` wrote, with its backward
 * when options->backward. Needs only the runtime (a libattnc built without
 * the compiler has this and not attnc_compile): the kernels are host-compiled
 * or NVRTC-compiled from the artifact's source, through the same cache. The
 * target must match the artifact's (cuda-sim runs a cuda artifact); head_dim
 * and dtype must be the kernels'; max_seq is the artifact's. */
ATTNC_API attnc_error *attnc_load(const char *dir, const char *name,
                                  const attnc_compile_options *options, attnc_variant **variant);
ATTNC_API void attnc_variant_free(attnc_variant *variant);

/* The variant's name, and whether its keys are its (normalised) queries
 * (LSH): then k is ignored and its gradient folded into dq. */
ATTNC_API const char *attnc_variant_name(const attnc_variant *variant);
ATTNC_API int attnc_variant_shared_qk(const attnc_variant *variant);
/* Whether the kernels were loaded from the cache instead of compiled. */
ATTNC_API int attnc_variant_from_cache(const attnc_variant *variant);
/* Version 3: the forward kernel's tile, query rows by key columns per
 * block, as it runs (the tuning database's choice where the spec left the
 * tile `auto`, the same one attnc train and attnc compile pick; a CUDA
 * variant's after fitting its GPU). 0 and 0 for a NULL variant. */
ATTNC_API void attnc_variant_tile(const attnc_variant *variant, int64_t *block_q,
                                  int64_t *block_kv);
/* The dtype of q, k, v, out and the gradients a call may pass besides f32:
 * a CUDA variant's kernel dtype, read and written in place; ATTNC_F32 when
 * only f32 is taken (CPU variants; low-rank CUDA variants, whose projections
 * run in f32 and whose f16/bf16 kernels read converted copies). */
ATTNC_API attnc_dtype attnc_variant_tensor_dtype(const attnc_variant *variant);

/* ---- parameters ------------------------------------------------------ */

typedef struct {
  const char *name; /* "E", "F", "lsh_rotations", or a per-head parameter's name */
  int ndim;
  int64_t shape[4];
  int learned; /* 1: has a gradient (attnc_backward writes it) */
} attnc_param_info;

/* The tensors every call takes after q, k, v, in this order. */
ATTNC_API int attnc_variant_num_params(const attnc_variant *variant);
ATTNC_API attnc_error *attnc_variant_param(const attnc_variant *variant, int index,
                                           attnc_param_info *info);
/* Parameter `index`'s initial value (E, F: Xavier-normal from `seed`;
 * rotations: the spec's LSH seed; per-head: the spec's init) into `out`
 * (f32, contiguous, of the parameter's shape). */
ATTNC_API attnc_error *attnc_variant_init_param(const attnc_variant *variant, int index,
                                                uint64_t seed, const attnc_tensor *out);

/* ---- running --------------------------------------------------------- */

typedef struct {
  size_t struct_size;          /* sizeof(attnc_call) */
  attnc_tensor q, k, v;        /* [B, H, N, D] (k ignored for shared-QK variants) */
  const attnc_tensor *lengths; /* [B] i32, or NULL (needs key_padding) */
  const attnc_tensor *params;  /* attnc_variant_num_params of them, in order */
  attnc_tensor out, lse;       /* [B, H, N, D], [B, H, N]: written by the forward;
                                  read by the backward (dense: no recompute) */
  void *stream;                /* CUDA: the CUstream (NULL: the legacy default
                                  stream); ignored on the CPU and the emulator */
  /* 0: a tensor the kernels cannot read as it is (strides that are not
   * contiguous, misaligned data) is an error naming it; 1: it is copied.
   * CUDA never copies (a copy is the caller's to make, on its stream): a
   * tensor that is not contiguous, or not 16-byte aligned, is an error. */
  int allow_copies;
  /* Backward only (attnc_backward): */
  attnc_tensor dout;           /* [B, H, N, D] */
  attnc_tensor dq, dk, dv;     /* like q, k, v (dk unused for shared-QK) */
  const attnc_tensor *dparams; /* like params; an entry with data NULL is skipped */
} attnc_call;

/* CUDA calls: every tensor in the variant's device memory (cuda-sim: host
 * memory), contiguous; q, k, v, out, dout, dq, dk, dv f32 or
 * attnc_variant_tensor_dtype, all the same; lse, params and dparams f32;
 * lengths i32 (values outside 0..N are clamped by the kernels, not
 * checked: reading them would wait for the device). The calls enqueue and
 * return: a failed launch is an error here, a fault inside a kernel
 * surfaces at the caller's next synchronisation. Calls on one handle take
 * turns (its scratch is one); a call on another stream than the last is
 * ordered after it by an event.
 *
 * The caller's CUDA state is left alone: every call (compile, load, free
 * included) makes the variant's device context current only for its own
 * duration and restores the thread's previous one. Nothing in a forward
 * or backward waits for the device: scratch that must grow comes from the
 * driver's stream-ordered pool (cuMemAllocAsync, and cuMemFreeAsync for
 * the old buffer) on the call's stream. CUDA graphs: a call may be
 * captured once a call of the same or a larger shape has run uncaptured
 * (while capturing, scratch cannot grow, and a call that would need it to
 * is an error saying so); a captured call skips the event ordering above,
 * so replays and other calls of the same handle are the caller's to
 * order. */

/* out, lse = attention(q, k, v; params). */
ATTNC_API attnc_error *attnc_forward(const attnc_variant *variant, const attnc_call *call);
/* dq, dk, dv, dparams from dout and the forward's out and lse. */
ATTNC_API attnc_error *attnc_backward(const attnc_variant *variant, const attnc_call *call);

#ifdef __cplusplus
}
#endif

#endif /* ATTNC_ATTNC_H */
