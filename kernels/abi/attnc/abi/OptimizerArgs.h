//===- OptimizerArgs.h - Arguments of the device optimizer kernels -*- C++ -*-===//
//
// Shared, byte for byte, by kernels/cuda/attnc/optimizer.cuh
// (compiled by NVRTC, or by the host compiler for the block emulator) and
// the runtime that fills them in (runtime/train/DeviceOptimizer.h). No
// includes, constexpr only, so NVRTC and the host compiler both read it.
// What the kernels compute: optimizer.cuh and docs/mixed-precision.md.
//
// Launch shapes (every kernel runs opt::kThreads threads per block, no
// dynamic shared memory):
//
//   attnc_opt_grad_sumsq     grid opt::reduceBlocks(n)    OptGradNormArgs
//   attnc_opt_grad_finalize  grid 1                       OptGradNormArgs
//   attnc_opt_adamw          grid opt::elementwiseBlocks(n) OptAdamWArgs
//   attnc_opt_cast           grid opt::elementwiseBlocks(n) OptCastArgs
//   attnc_opt_scale_into     grid opt::elementwiseBlocks(n) OptScaleArgs
//   attnc_opt_ordered_sum    grid opt::elementwiseBlocks(n) OptOrderedSumArgs
//
// The gradient norm is bit-reproducible for a given n when the first
// kernel's grid is reduceBlocks(n) (a function of n only, not of the GPU),
// and num_partials is that grid.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_OPTIMIZERARGS_H
#define ATTNC_ABI_OPTIMIZERARGS_H

namespace attnc {

namespace opt {

/// Threads per block of every optimizer kernel.
constexpr int kThreads = 256;
/// Most blocks (partial sums) of the first reduction kernel; the second
/// kernel sums them with one block.
constexpr int kMaxPartials = 1024;
/// Elements per thread the reduction aims at before it adds blocks.
constexpr int kItemsPerThread = 8;
/// Most blocks of the element-wise kernels (grid-stride loops beyond).
constexpr int kMaxElementwiseBlocks = 65535;

/// The reduction's grid for n elements: 1 .. kMaxPartials.
constexpr int reduceBlocks(long long n) {
  const long long per = (long long)kThreads * kItemsPerThread;
  const long long b = (n + per - 1) / per;
  return b < 1 ? 1 : (b > kMaxPartials ? kMaxPartials : (int)b);
}

/// The element-wise kernels' grid for n elements.
constexpr int elementwiseBlocks(long long n) {
  const long long b = (n + kThreads - 1) / kThreads;
  return b < 1 ? 1 : (b > kMaxElementwiseBlocks ? kMaxElementwiseBlocks : (int)b);
}

/// OptAdamWArgs::copy_type and OptCastArgs::dst_type.
constexpr int kCopyNone = 0;
constexpr int kCopyFp16 = 1; ///< __half
constexpr int kCopyBf16 = 2; ///< __nv_bfloat16

} // namespace opt

/// What attnc_opt_grad_finalize writes (device memory; the host may copy it
/// back at any time after the step, e.g. with the loss).
struct OptStepState {
  double sumsq;      ///< Σ g², g the unscaled gradients, fp64
  float norm;        ///< sqrt(sumsq) rounded to fp32 (NaN/Inf when non-finite)
  float clip_factor; ///< min(1, clip_norm / norm) as AdamW applies it; 1 without clipping
  int nonfinite;     ///< 1 when some gradient is Inf or NaN: the step is skipped
  int pad;
};

/// The two reduction kernels: attnc_opt_grad_sumsq (stage 1) and
/// attnc_opt_grad_finalize (stage 2).
struct OptGradNormArgs {
  float *grads;        ///< [n] fp32; multiplied by inv_scale in place unless it is 1
  double *partials;    ///< [num_partials]: stage 1 writes one per block
  OptStepState *state; ///< stage 2 writes it
  long long n;
  int num_partials; ///< stage 1's grid (reduceBlocks(n)); read by stage 2
  float inv_scale;  ///< 1 / loss scale (1 when there is no loss scaling)
  float clip_norm;  ///< <= 0: no clipping
  int pad;
};

/// AdamW over a flat fp32 master-weight buffer (attnc_opt_adamw). The
/// per-step constants are computed on the host exactly as
/// runtime/train/Optimizer.cpp does (runtime/train/DeviceOptimizer.h).
struct OptAdamWArgs {
  float *weights, *m, *v;    ///< [n] each, updated in place
  const float *grads;        ///< [n], unscaled (after stage 1); not modified
  const OptStepState *state; ///< clip factor and the non-finite flag
  /// Weight decay applies to the elements in these ranges: pairs
  /// [begin, end) of element offsets, sorted, disjoint, non-empty;
  /// [2 * num_decay_ranges] long longs. Elsewhere no decay.
  const long long *decay_ranges;
  void *copy; ///< nullptr or [n] __half / __nv_bfloat16 (copy_type)
  long long n;
  int num_decay_ranges;
  int copy_type; ///< opt::kCopyNone, kCopyFp16 or kCopyBf16
  float lr;      ///< learningRate(config, step)
  float beta1, beta2;
  float one_minus_beta1, one_minus_beta2;           ///< 1 - beta, rounded in fp32 as AdamW does
  float inv_bias_correction1, inv_bias_correction2; ///< 1 / (1 - beta^t), t = step + 1
  float eps;
  float decay_factor; ///< 1 - lr * weight_decay
  int pad;
};

/// A 16-bit copy of an fp32 buffer (attnc_opt_cast), round to nearest even.
struct OptCastArgs {
  const float *src; ///< [n]
  void *dst;        ///< [n] __half or __nv_bfloat16
  long long n;
  int dst_type; ///< opt::kCopyFp16 or kCopyBf16
  int pad;
};

/// dst = factor · src element-wise (attnc_opt_scale_into), one fp32
/// multiply rounded to nearest: a micro-batch's gradient weighted by its
/// share of the step's targets (and unscaled by 1 / loss scale) before the
/// data-parallel exchange, as runtime/train/DataParallel.cpp weighs it on
/// the host.
struct OptScaleArgs {
  const float *src; ///< [n]
  float *dst;       ///< [n]; may be src
  long long n;
  float factor;
  int pad;
};

/// out[i] = parts[0][i] + parts[1][i] + ... in part order, starting from
/// 0 (attnc_opt_ordered_sum): the data-parallel exchange's sum of every
/// micro-batch's weighted gradient, in micro-batch order whatever the
/// rank count, so its bits depend on neither the ranks nor the buckets.
struct OptOrderedSumArgs {
  const float *parts; ///< [num_parts][part_stride]
  float *out;         ///< [n]
  long long n;
  long long part_stride; ///< floats from one part to the next (>= n)
  int num_parts;
  int pad;
};

} // namespace attnc

#endif // ATTNC_ABI_OPTIMIZERARGS_H
