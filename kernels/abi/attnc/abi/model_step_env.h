//===- model_step_env.h - What a generated CUDA step and its runtime share -===//
//
// A generated CUDA training step (codegen/ModelEmitterCuda.cpp, --target cuda)
// is two programs: kernels (NVRTC, `model_<name>.cu`) and host code
// (`attnc_cuda_step_<model>`) that orders them, calls cuBLAS through the
// runtime and never touches device memory itself. This header is the
// contract between the two and the runtime: the one kernel argument
// struct, and the runtime's services. No includes, so NVRTC, the host
// compiler and the SIMT emulator all read it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_MODEL_STEP_ENV_H
#define ATTNC_ABI_MODEL_STEP_ENV_H

/// The contract of a generated CUDA step (host code and kernels) with the
/// runtime and model_step.cuh, recorded in a CUDA artifact's manifest
/// ("step_abi"): bumped when a fixed kernel or the env changes, so that a
/// step compiled by another attnc is refused with a message, not failed at
/// a kernel lookup. 1 (no field): before the embedding gradient's sort
/// kernels; 2: with them and the device AdamW in every step module.
#define ATTNC_CUDA_STEP_ABI 2

/// The single argument of every step kernel: pointers (inputs, then
/// outputs), sizes and scalars, in an order each kernel documents. One
/// struct for all keeps the host side one launch call.
struct attnc_kargs {
  const void *p[24];
  long long n[6];
  float f[4];
  unsigned long long seed;
  unsigned int step;
  int flag;
};

/// What the runtime lends a generated CUDA step. Every pointer is a device
/// address (host memory under the emulator); the step only offsets them.
/// Calls return 0 or an error code that the step returns at once, the
/// runtime keeping the message.
struct attnc_cuda_env {
  void *ctx;
  /// Launches kernel `name` of the step's module over `blocks` blocks of
  /// `threads` threads.
  int (*launch)(void *ctx, const char *name, long long blocks, int threads,
                const attnc_kargs *args);
  /// C[M, N] = op(A)·op(B), row-major fp32 storage (cuBLAS).
  int (*gemm)(void *ctx, int ta, int tb, long long M, long long N, long long K, const float *A,
              const float *B, float *C);
  /// Attention and its gradient, operands as in the CPU step's env
  /// (kernels/cpu/attnc/model_step.h).
  int (*attention)(void *ctx, long long layer, const float *const *in, float *out, float *lse);
  int (*attention_grad)(void *ctx, long long layer, const float *const *in, float *const *out);
  /// The NaN/Inf check of `n` values (rows of `width`) named `what`.
  /// `scaled`: a backward value, multiplied by loss_scale (with fp16 an
  /// overflow there means "lower the scale", not divergence).
  int (*check_finite)(void *ctx, const char *what, const float *x, long long n, long long width,
                      int scaled);
  int (*copy)(void *ctx, void *dst, const void *src, unsigned long long bytes);
  int (*zero)(void *ctx, void *dst, unsigned long long bytes);
  /// Device to host (the loss).
  int (*read)(void *ctx, void *host, const void *src, unsigned long long bytes);
  /// Device scratch of at least `bytes`, valid until the next call; null
  /// when it cannot be had. Row kernels whose rows do not fit in shared
  /// memory keep the rest of each row here.
  void *(*scratch)(void *ctx, unsigned long long bytes);
  unsigned long long dropout_seed;
  unsigned int step;
  int dropout_on;
  /// The loss gradient's seed: 1, or the loss scale under fp16.
  float loss_scale;
  /// Gradient `index` (grads[index]) is final once the work enqueued so
  /// far has run: a data-parallel run may start exchanging it. Null: no
  /// reports. Non-zero: an error (the step stops).
  int (*grad_ready)(void *ctx, long long index);
};

#endif // ATTNC_ABI_MODEL_STEP_ENV_H
