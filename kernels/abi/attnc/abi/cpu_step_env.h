//===- cpu_step_env.h - What a generated CPU step and its runtime share ----===//
//
// A generated CPU training step (codegen/ModelEmitterCpu.cpp, --target cpu,
// `attnc_step_<model>`) runs its own fused row kernels and calls the
// runtime for everything else: GEMMs, attention, and the report of a NaN or
// Inf. This struct is that contract, read by the generated code (compiled
// into a shared object by the host compiler) and by the runtime
// (runtime/train/CompiledStep.cpp). No includes but <stdint.h>.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_CPU_STEP_ENV_H
#define ATTNC_ABI_CPU_STEP_ENV_H

#include <stdint.h>

/// What the runtime lends a generated step. Attention operands are in the
/// order q, k, v, E, F, rotations, params (absent ones null); the gradient
/// call's inputs are q, k, v, out, lse, dout, E, F, rotations, params and
/// its outputs dq, dk, dv, dE, dF, dparams (written, not accumulated).
struct attnc_model_env {
  void *ctx;
  /// C[M, N] = op(A)·op(B), row-major; op transposes when ta / tb is set.
  void (*gemm)(void *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
               const float *B, float *C);
  int (*attention)(void *ctx, int64_t layer, const float *const *in, float *out, float *lse);
  int (*attention_grad)(void *ctx, int64_t layer, const float *const *in, float *const *out);
  /// A checked value (a layer's output, the logits) holds a NaN or Inf at
  /// `index` (rows of `width`): the runtime records the error; the step
  /// returns its non-zero result.
  int (*nonfinite)(void *ctx, const char *what, int64_t index, int64_t width, float value);
  /// Gradient `index` (of the step's `grads`) holds its final value: the
  /// backward writes it no more this step. Called in the backward's order,
  /// so a data-parallel runtime can start exchanging the gradients that
  /// are done while the rest are computed (docs/distributed.md). May be
  /// null.
  void (*grad_ready)(void *ctx, int64_t index);
  unsigned long long dropout_seed;
  unsigned int step;
  int dropout_on; ///< 0: dropout ops are the identity (evaluation)
};

#endif // ATTNC_ABI_CPU_STEP_ENV_H
