//===- optimizer.cuh - Gradient norm, AdamW, 16-bit weight copies ---------===//
//
// The device half of the optimizer step of mixed-precision training
// (docs/mixed-precision.md) over one flat fp32 buffer of every parameter
// (master weights), its gradients and the AdamW moments. NVRTC-safe like
// common.cuh; argument structs and launch shapes in kernels/abi/attnc/abi/OptimizerArgs.h.
// Every kernel takes its one struct argument and runs opt::kThreads
// threads; the entry points are defined here (extern "C"), so a program
// that includes this header has them:
//
//   attnc_opt_grad_sumsq (grid reduceBlocks(n))
//       g ← g·inv_scale in place (skipped when inv_scale is 1); block b
//       writes partials[b] = Σ g² over its elements i ≡ b·kThreads + t
//       (mod gridDim·kThreads), in fp64: each thread sums its elements in
//       order, then a fixed butterfly over the warp and warp 0 over the
//       warps' sums.
//   attnc_opt_grad_finalize (grid 1)
//       sumsq = Σ partials[0..num_partials) in the same fixed order, norm =
//       sqrt(sumsq), nonfinite = sumsq is Inf or NaN (squares of finite
//       floats cannot overflow fp64, so exactly when some g is Inf/NaN),
//       clip_factor = fp32(clip_norm / norm) when clip_norm > 0 and norm >
//       clip_norm, else 1 (what AdamW::step applies). No atomics anywhere,
//       so the result depends only on n and the grid.
//   attnc_opt_adamw (grid elementwiseBlocks(n))
//       nothing at all when state->nonfinite; else per element, in fp32 with
//       every operation rounded separately (no FMA contraction: __fmul_rn /
//       __fadd_rn), as runtime/train/Optimizer.cpp:
//         g ← g·clip_factor
//         m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·(g·g)
//         w ← w·decay_factor                  inside a decay range only
//         w ← w − lr·((m·ibc1) / (sqrt(v·ibc2) + eps))
//       and, when `copy` is set, copy ← fp16/bf16(w) (round to nearest).
//       The gradients are not modified (AdamW::step scales its gradients
//       in place when clipping; here the factor is applied on the fly).
//   attnc_opt_cast (grid elementwiseBlocks(n))
//       dst ← fp16/bf16(src), e.g. the first copy before any step.
//
// Weight decay is per segment: OptAdamWArgs::decay_ranges lists the
// [begin, end) element ranges that decay (one per decayed parameter, or
// merged runs). Each thread binary-searches its first element's range once
// and walks forward with its grid-stride loop, so the cost is a few cached
// loads per thread rather than a byte per element.
//
// The host never waits inside a step: the clip factor and the skip decision
// are read from device memory by the kernels. The host reads OptStepState
// back (8 bytes that matter) when it needs them: the LossScaler update
// (fp16) and its own step count (a skipped step must not advance the
// bias corrections or the schedule).
//
// Shared storage is declared with ATTNC_OPT_SHARED so that the host block
// emulator (kernels/emulator/attnc/simt_emulator.h, included first)
// can run these kernels.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_OPTIMIZER_CUH
#define ATTNC_CUDA_OPTIMIZER_CUH

#include "attnc/abi/OptimizerArgs.h"
#include "attnc/common.cuh"

/// Declares `Type &name` bound to block-shared storage: real __shared__
/// memory under NVRTC, the emulated block's under the host emulator.
#ifndef ATTNC_OPT_SHARED
#ifdef ATTNC_CUDA_SIMT_EMULATOR_H
#define ATTNC_OPT_SHARED(Type, name) Type &name = ::emu::shared<Type>()
#else
#define ATTNC_OPT_SHARED(Type, name)                                                               \
  __shared__ __align__(16) Type name##Storage;                                                     \
  Type &name = name##Storage
#endif
#endif

/// __launch_bounds__ means nothing to the emulator.
#ifdef ATTNC_CUDA_SIMT_EMULATOR_H
#define ATTNC_OPT_BOUNDS
#else
#define ATTNC_OPT_BOUNDS __launch_bounds__(attnc::opt::kThreads)
#endif

namespace attnc {
namespace opt {

//===-- Arithmetic rounded step by step -----------------------------------===//

// NVRTC contracts a*b+c into an FMA by default; the CPU optimizer rounds the
// product first. The _rn intrinsics are never contracted. The host
// emulator's plain operators round each step (x86-64 without -mfma).
#ifdef ATTNC_CUDA_SIMT_EMULATOR_H
ATTNC_HD float mul(float a, float b) { return a * b; }
ATTNC_HD float add(float a, float b) { return a + b; }
ATTNC_HD float sub(float a, float b) { return a - b; }
ATTNC_HD float divRn(float a, float b) { return a / b; }
ATTNC_HD float sqrtRn(float a) { return ::sqrtf(a); }
ATTNC_HD double sqrtD(double a) { return ::sqrt(a); }
#else
ATTNC_HD float mul(float a, float b) { return __fmul_rn(a, b); }
ATTNC_HD float add(float a, float b) { return __fadd_rn(a, b); }
ATTNC_HD float sub(float a, float b) { return __fsub_rn(a, b); }
ATTNC_HD float divRn(float a, float b) { return __fdiv_rn(a, b); }
ATTNC_HD float sqrtRn(float a) { return __fsqrt_rn(a); }
ATTNC_HD double sqrtD(double a) { return __dsqrt_rn(a); }
#endif

//===-- Deterministic block reduction in fp64 -----------------------------===//

constexpr int kWarps = kThreads / 32;

struct ReduceSmem {
  double warp[kWarps];
};

/// Butterfly over the warp: every lane gets the same sum, in a fixed order.
ATTNC_HD double warpSumD(double x) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1)
    x += __shfl_xor_sync(kFullMask, x, m);
  return x;
}

/// The block's sum of `x`, valid in thread 0. Every thread must call it.
ATTNC_HD double blockSumD(double x, ReduceSmem &sm) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  x = warpSumD(x);
  if (lane == 0)
    sm.warp[warp] = x;
  __syncthreads();
  double total = 0.0;
  if (warp == 0) {
    total = lane < kWarps ? sm.warp[lane] : 0.0;
    total = warpSumD(total);
  }
  return total;
}

//===-- Kernels -----------------------------------------------------------===//

ATTNC_HD void gradSumSq(const OptGradNormArgs &a) {
  ATTNC_OPT_SHARED(ReduceSmem, sm);
  const float s = a.inv_scale;
  const bool rescale = s != 1.0f;
  const long long stride = (long long)gridDim.x * kThreads;
  double acc = 0.0;
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < a.n; i += stride) {
    float g = a.grads[i];
    if (rescale) {
      g = mul(g, s);
      a.grads[i] = g;
    }
    // A product of two floats is exact in fp64: FMA or not, the same sum.
    acc += (double)g * (double)g;
  }
  const double total = blockSumD(acc, sm);
  if (threadIdx.x == 0)
    a.partials[blockIdx.x] = total;
}

ATTNC_HD void gradFinalize(const OptGradNormArgs &a) {
  ATTNC_OPT_SHARED(ReduceSmem, sm);
  double acc = 0.0;
  for (int i = int(threadIdx.x); i < a.num_partials; i += kThreads)
    acc += a.partials[i];
  const double sumsq = blockSumD(acc, sm);
  if (threadIdx.x != 0)
    return;
  // sumsq >= 0: finite exactly when it is at most DBL_MAX (NaN compares false).
  const bool finite = sumsq <= 1.7976931348623157e308;
  const double norm = sqrtD(sumsq);
  float clip = 1.0f;
  if (finite && a.clip_norm > 0.0f && norm > (double)a.clip_norm)
    clip = (float)((double)a.clip_norm / norm);
  a.state->sumsq = sumsq;
  a.state->norm = (float)norm;
  a.state->clip_factor = clip;
  a.state->nonfinite = finite ? 0 : 1;
  a.state->pad = 0;
}

/// Writes w to element i of a 16-bit copy.
ATTNC_HD void storeCopy(void *dst, int type, long long i, float w) {
  if (type == kCopyFp16)
    static_cast<__half *>(dst)[i] = __float2half_rn(w);
  else if (type == kCopyBf16)
    static_cast<__nv_bfloat16 *>(dst)[i] = __float2bfloat16_rn(w);
}

/// The first decay range whose end is past element i (num if none).
ATTNC_HD int firstRangeAfter(const long long *ranges, int num, long long i) {
  int lo = 0, hi = num;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (ranges[2 * mid + 1] <= i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

ATTNC_HD void adamW(const OptAdamWArgs &a) {
  if (a.state->nonfinite)
    return; // the skipped step: weights, moments and copy stay as they are
  const float clip = a.state->clip_factor;
  const float b1 = a.beta1, b2 = a.beta2, c1 = a.one_minus_beta1, c2 = a.one_minus_beta2;
  const float ibc1 = a.inv_bias_correction1, ibc2 = a.inv_bias_correction2;
  const float lr = a.lr, eps = a.eps, decayFactor = a.decay_factor;
  const long long stride = (long long)gridDim.x * kThreads;
  long long i = (long long)blockIdx.x * kThreads + threadIdx.x;
  const int numRanges = a.num_decay_ranges;
  int r = firstRangeAfter(a.decay_ranges, numRanges, i);
  for (; i < a.n; i += stride) {
    while (r < numRanges && a.decay_ranges[2 * r + 1] <= i)
      ++r;
    const bool decay = r < numRanges && a.decay_ranges[2 * r] <= i;
    const float g = mul(a.grads[i], clip);
    const float m = add(mul(b1, a.m[i]), mul(c1, g));
    const float v = add(mul(b2, a.v[i]), mul(c2, mul(g, g)));
    a.m[i] = m;
    a.v[i] = v;
    float w = a.weights[i];
    if (decay)
      w = mul(w, decayFactor);
    const float update = divRn(mul(m, ibc1), add(sqrtRn(mul(v, ibc2)), eps));
    w = sub(w, mul(lr, update));
    a.weights[i] = w;
    if (a.copy)
      storeCopy(a.copy, a.copy_type, i, w);
  }
}

ATTNC_HD void cast(const OptCastArgs &a) {
  const long long stride = (long long)gridDim.x * kThreads;
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < a.n; i += stride)
    storeCopy(a.dst, a.dst_type, i, a.src[i]);
}

ATTNC_HD void scaleInto(const OptScaleArgs &a) {
  const long long stride = (long long)gridDim.x * kThreads;
  const float f = a.factor;
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < a.n; i += stride)
    a.dst[i] = mul(f, a.src[i]);
}

ATTNC_HD void orderedSum(const OptOrderedSumArgs &a) {
  const long long stride = (long long)gridDim.x * kThreads;
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < a.n; i += stride) {
    float s = 0.0f; // as the host exchange starts its sums
    for (int m = 0; m < a.num_parts; ++m)
      s = add(s, a.parts[(long long)m * a.part_stride + i]);
    a.out[i] = s;
  }
}

} // namespace opt
} // namespace attnc

//===-- Entry points ------------------------------------------------------===//

extern "C" __global__ void ATTNC_OPT_BOUNDS attnc_opt_grad_sumsq(attnc::OptGradNormArgs a) {
  attnc::opt::gradSumSq(a);
}
extern "C" __global__ void ATTNC_OPT_BOUNDS attnc_opt_grad_finalize(attnc::OptGradNormArgs a) {
  attnc::opt::gradFinalize(a);
}
extern "C" __global__ void ATTNC_OPT_BOUNDS attnc_opt_adamw(attnc::OptAdamWArgs a) {
  attnc::opt::adamW(a);
}
extern "C" __global__ void ATTNC_OPT_BOUNDS attnc_opt_cast(attnc::OptCastArgs a) {
  attnc::opt::cast(a);
}

#endif // ATTNC_CUDA_OPTIMIZER_CUH
extern "C" __global__ void ATTNC_OPT_BOUNDS attnc_opt_scale_into(attnc::OptScaleArgs a) {
  attnc::opt::scaleInto(a);
}
extern "C" __global__ void ATTNC_OPT_BOUNDS attnc_opt_ordered_sum(attnc::OptOrderedSumArgs a) {
  attnc::opt::orderedSum(a);
}
