//===- model_step.cuh - Device side of a generated CUDA training step -----===//
//
// What the kernels of a generated `model_<name>.cu` share: block-wide row
// helpers (each row-local kernel is one block per row, its threads striding
// the columns) and the fixed kernels of the step (reductions over rows,
// head layout, cross-entropy). NVRTC-safe (no includes but the project's
// no-include headers); also compiles on the host under the SIMT emulator
// (kernels/emulator/attnc/simt_emulator.h), which is how the test
// suite runs these kernels without a GPU.
//
// Every reduction has a fixed order: a row's sums go lane → warp → block
// in thread order, sums over rows go in fixed row segments then segment
// by segment, and the embedding gradient adds each token's rows in
// increasing order (its counting sort's integer atomics are exact). So a
// step is bit-identical run to run, with no float atomics. Blocks are a
// multiple of 32 threads.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_MODEL_STEP_CUH
#define ATTNC_CUDA_MODEL_STEP_CUH

#include "attnc/abi/Activations.h"
#include "attnc/abi/Philox.h"
#include "attnc/abi/model_step_env.h"
// The device AdamW (its kernels are in every step module, so training can
// keep the parameters on the device: runtime/train/CompiledStepCuda.cpp).
#include "attnc/optimizer.cuh"

#ifdef ATTNC_CUDA_SIMT_EMULATOR_H
/// Under the emulator a block's shared storage is the emulator's.
#define ATTNC_STEP_SHARED(Type, name) Type &name = ::emu::shared<Type>()
#else
#define ATTNC_STEP_SHARED(Type, name) __shared__ Type name
#endif

namespace attnc {
namespace step {

/// Scratch of the block reductions: one slot per warp.
constexpr int kMaxWarps = 32;

/// Σ v over the block, the same value in every thread. Lane sums go down
/// a butterfly, lane 0's is the warp's, warps add in order.
template <class T> ATTNC_HD T blockSum(T v, T *red) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  T s = 0;
  for (int w = 0; w < int(blockDim.x + 31) / 32; ++w)
    s += red[w];
  __syncthreads(); // red is reused by the next reduction
  return s;
}

template <class T> ATTNC_HD T blockMax(T v, T *red) {
  for (int o = 16; o > 0; o >>= 1) {
    T u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  T m = red[0];
  for (int w = 1; w < int(blockDim.x + 31) / 32; ++w)
    m = red[w] > m ? red[w] : m;
  __syncthreads();
  return m;
}

// Activations (kernels/abi/attnc/abi/Activations.h, the CPU step's formulas) with expf.
struct DeviceExp {
  ATTNC_HD float operator()(float x) const { return expf(x); }
};
ATTNC_HD float activation(int kind, float x) { return act::apply(kind, x, DeviceExp()); }
ATTNC_HD float activationGrad(int kind, float x) { return act::derivative(kind, x, DeviceExp()); }

/// y = (x − mean)·rstd·gamma + beta over one row of C, two passes (mean,
/// then the centred variance). Every thread calls it.
ATTNC_HD void layerNormRow(const float *x, const float *gamma, const float *beta, float *y,
                           float *mean, float *rstd, int C, float eps, float *red) {
  float s = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    s += x[c];
  const float m = blockSum(s, red) / float(C);
  float v = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    v += (x[c] - m) * (x[c] - m);
  const float rs = 1.0f / sqrtf(blockSum(v, red) / float(C) + eps);
  if (threadIdx.x == 0)
    *mean = m, *rstd = rs;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    y[c] = (x[c] - m) * rs * gamma[c] + beta[c];
}

/// dx of a layer norm over one row of C.
ATTNC_HD void layerNormGradRow(const float *dy, const float *x, const float *gamma, float mean,
                               float rstd, float *dx, int C, float *red) {
  float sg = 0, sgx = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = dy[c] * gamma[c];
    sg += g, sgx += g * ((x[c] - mean) * rstd);
  }
  const float mg = blockSum(sg, red) / float(C), mgx = blockSum(sgx, red) / float(C);
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    dx[c] = rstd * (dy[c] * gamma[c] - mg - ((x[c] - mean) * rstd) * mgx);
}

/// The residual dropout of element `index` (the CPU step's mask).
ATTNC_HD float dropout(float x, const attnc_kargs &a, unsigned stream, unsigned long long index,
                       float p, float keepScale) {
  if (!a.flag)
    return x;
  return philox::dropoutUniform(a.seed, stream, a.step, index) < p ? 0.0f : x * keepScale;
}

ATTNC_HD long long globalThread() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }

} // namespace step
} // namespace attnc

//===-- The fixed kernels (attnc_kargs layouts as documented) -------------===//

// Sums over rows go in two stages with a fixed split, so they use the
// whole GPU and still add in one order: stage 1 gives each block a tile of
// kColumnTile columns and a segment of kRowSegment rows (one thread per
// column, rows in order) and writes partial sums; stage 2 adds a column's
// partials segment by segment. The split depends only on the shape.
namespace attnc {
namespace step {
constexpr int kColumnTile = 128;
constexpr int kRowSegment = 256;

/// A stage-1 thread's share: column c, rows [r0, r1) of segment `index`
/// (false: no column). Blocks are column tiles × segments, tile fastest.
struct RowSegment {
  long long c, index, r0, r1;
};
ATTNC_HD bool rowSegment(long long R, long long C, RowSegment &seg) {
  const long long tiles = (C + kColumnTile - 1) / kColumnTile, s = blockIdx.x / tiles;
  seg.c = (blockIdx.x % tiles) * kColumnTile + threadIdx.x;
  seg.index = s;
  seg.r0 = s * kRowSegment;
  seg.r1 = seg.r0 + kRowSegment < R ? seg.r0 + kRowSegment : R;
  return seg.c < C;
}
} // namespace step
} // namespace attnc

/// Stage 1 of out[c] = Σ_r x[r, c]: partial[s][c] over segment s. p: x,
/// partial; n: R, C. Blocks: column tiles × segments, tile fastest.
extern "C" __global__ void attnc_step_column_sum_partial(attnc_kargs a) {
  const long long C = a.n[1];
  attnc::step::RowSegment seg;
  if (!attnc::step::rowSegment(a.n[0], C, seg))
    return;
  const float *x = (const float *)a.p[0];
  float s = 0;
  for (long long r = seg.r0; r < seg.r1; ++r)
    s += x[r * C + seg.c];
  ((float *)a.p[1])[seg.index * C + seg.c] = s;
}

/// Stage 2: out[c] = Σ_s partial[s][c], segments in order; with `flag` set,
/// also out2[c] = Σ_s partial2[s][c]. p: partial, out[, partial2, out2];
/// n: segments, C. One thread per column.
extern "C" __global__ void attnc_step_column_sum_finish(attnc_kargs a) {
  const long long c = attnc::step::globalThread(), S = a.n[0], C = a.n[1];
  if (c >= C)
    return;
  for (int k = 0; k < (a.flag ? 2 : 1); ++k) {
    const float *p = (const float *)a.p[2 * k];
    float s = 0;
    for (long long seg = 0; seg < S; ++seg)
      s += p[seg * C + c];
    ((float *)a.p[2 * k + 1])[c] = s;
  }
}

/// Stage 1 of dgamma = Σ_r dy·x̂ and dbeta = Σ_r dy: partials of both.
/// p: dy, x, mean, rstd, partial dgamma, partial dbeta; n: R, C.
extern "C" __global__ void attnc_step_layer_norm_param_grad_partial(attnc_kargs a) {
  const long long C = a.n[1];
  attnc::step::RowSegment seg;
  if (!attnc::step::rowSegment(a.n[0], C, seg))
    return;
  const long long c = seg.c;
  const float *dy = (const float *)a.p[0], *x = (const float *)a.p[1];
  const float *mean = (const float *)a.p[2], *rstd = (const float *)a.p[3];
  float sg = 0, sb = 0;
  for (long long r = seg.r0; r < seg.r1; ++r) {
    const float d = dy[r * C + c];
    sg += d * ((x[r * C + c] - mean[r]) * rstd[r]);
    sb += d;
  }
  ((float *)a.p[4])[seg.index * C + c] = sg;
  ((float *)a.p[5])[seg.index * C + c] = sb;
}

// The embedding gradient, dtable[v] = Σ_{r: tokens[r] = v} dy[r] and
// dpos[s] = Σ_{r mod S = s} dy[r], each sum over its rows in increasing
// order (the CPU step's order, so the bits do not depend on the GPU). The
// rows are grouped by token with a stable counting sort on the device, in
// the runtime's scratch: counts per (token, row segment), their exclusive
// scan, a scatter that walks each segment in order; then one thread per
// (token, column) adds its token's rows. This keeps every sum ordered
// while using V × C threads instead of C.

/// Sort, stage 1: counts[v·segs + s] = rows of segment s with token v
/// (integer atomics, so the counts are exact whatever the order). p:
/// tokens, counts (zeroed); n: R, V. One block of kRowSegment threads per
/// segment.
extern "C" __global__ void attnc_step_token_count(attnc_kargs a) {
  const long long R = a.n[0], segs = (R + attnc::step::kRowSegment - 1) / attnc::step::kRowSegment;
  const long long r = (long long)blockIdx.x * attnc::step::kRowSegment + threadIdx.x;
  if (threadIdx.x >= attnc::step::kRowSegment || r >= R)
    return;
  const int v = ((const int *)a.p[0])[r];
  atomicAdd((int *)a.p[1] + v * segs + blockIdx.x, 1);
}

/// Sort, stage 2: counts become each (token, segment)'s first place in
/// the order, and offsets[v] the first place of token v (offsets[V] = R).
/// p: counts, offsets; n: R, V. One block: a thread per token totals its
/// segments, thread 0 scans the totals, each token then scans its
/// segments.
extern "C" __global__ void attnc_step_token_offsets(attnc_kargs a) {
  const long long R = a.n[0], V = a.n[1],
                  segs = (R + attnc::step::kRowSegment - 1) / attnc::step::kRowSegment;
  int *counts = (int *)a.p[0], *offsets = (int *)a.p[1];
  for (long long v = threadIdx.x; v < V; v += blockDim.x) {
    int total = 0;
    for (long long s = 0; s < segs; ++s)
      total += counts[v * segs + s];
    offsets[v] = total;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (long long v = 0; v < V; ++v) {
      const int t = offsets[v];
      offsets[v] = run;
      run += t;
    }
    offsets[V] = run;
  }
  __syncthreads();
  for (long long v = threadIdx.x; v < V; v += blockDim.x) {
    int run = offsets[v];
    for (long long s = 0; s < segs; ++s) {
      const int t = counts[v * segs + s];
      counts[v * segs + s] = run;
      run += t;
    }
  }
}

/// Sort, stage 3: order[k] = the rows grouped by token, increasing within
/// a token. p: tokens, counts (the places from stage 2; advanced), order;
/// n: R. One thread per segment, walking its rows in order.
extern "C" __global__ void attnc_step_token_scatter(attnc_kargs a) {
  const long long R = a.n[0], segs = (R + attnc::step::kRowSegment - 1) / attnc::step::kRowSegment;
  const long long s = attnc::step::globalThread();
  if (s >= segs)
    return;
  const int *tokens = (const int *)a.p[0];
  int *place = (int *)a.p[1], *order = (int *)a.p[2];
  const long long r1 =
      (s + 1) * attnc::step::kRowSegment < R ? (s + 1) * attnc::step::kRowSegment : R;
  for (long long r = s * attnc::step::kRowSegment; r < r1; ++r)
    order[place[tokens[r] * segs + s]++] = int(r);
}

/// dtable[v, c] = Σ dy[order[k], c] over k in [offsets[v], offsets[v+1]),
/// written from zero. p: dy, offsets, order, dtable; n: V, C. Blocks:
/// column tiles × tokens, tile fastest; one thread per column.
extern "C" __global__ void attnc_step_embed_grad_table(attnc_kargs a) {
  const long long V = a.n[0], C = a.n[1];
  const long long tiles = (C + attnc::step::kColumnTile - 1) / attnc::step::kColumnTile;
  const long long v = blockIdx.x / tiles,
                  c = (blockIdx.x % tiles) * attnc::step::kColumnTile + threadIdx.x;
  if (v >= V || c >= C || threadIdx.x >= attnc::step::kColumnTile)
    return;
  const float *dy = (const float *)a.p[0];
  const int *offsets = (const int *)a.p[1], *order = (const int *)a.p[2];
  float s = 0;
  for (int k = offsets[v]; k < offsets[v + 1]; ++k)
    s += dy[(long long)order[k] * C + c];
  ((float *)a.p[3])[v * C + c] = s;
}

/// dpos[s, c] = Σ_b dy[b·S + s, c], b increasing, written from zero.
/// p: dy, dpos; n: R, S, C. One thread per element of dpos.
extern "C" __global__ void attnc_step_embed_grad_positions(attnc_kargs a) {
  const long long i = attnc::step::globalThread(), R = a.n[0], S = a.n[1], C = a.n[2];
  if (i >= S * C)
    return;
  const float *dy = (const float *)a.p[0];
  const long long c = i % C;
  float s = 0;
  for (long long r = i / C; r < R; r += S)
    s += dy[r * C + c];
  ((float *)a.p[1])[i] = s;
}

/// [B·S, H·D] → [B, H, S, D] (flag 0) or back (flag 1). p: x, y;
/// n: B, H, S, D. One thread per element of y.
extern "C" __global__ void attnc_step_heads(attnc_kargs a) {
  const long long i = attnc::step::globalThread(), B = a.n[0], H = a.n[1], S = a.n[2], D = a.n[3];
  if (i >= B * H * S * D)
    return;
  const float *x = (const float *)a.p[0];
  float *y = (float *)a.p[1];
  const long long d = i % D, rest = i / D;
  if (!a.flag) { // i indexes [B, H, S, D]
    const long long s = rest % S, h = (rest / S) % H, b = rest / (S * H);
    y[i] = x[((b * S + s) * H + h) * D + d];
  } else { // i indexes [B·S, H·D]
    const long long h = rest % H, r = rest / H, b = r / S, s = r % S;
    y[i] = x[((b * H + h) * S + s) * D + d];
  }
}

/// Cross-entropy, stage 1: each row's loss (−1 for a row without a
/// target), one thread per row. p: logits, targets, row losses (double);
/// n: R, V.
extern "C" __global__ void attnc_step_cross_entropy_rows(attnc_kargs a) {
  const long long r = attnc::step::globalThread(), R = a.n[0], V = a.n[1];
  if (r >= R)
    return;
  const int t = ((const int *)a.p[1])[r];
  double *rowLoss = (double *)a.p[2];
  if (t < 0) {
    rowLoss[r] = -1;
    return;
  }
  const float *l = (const float *)a.p[0] + r * V;
  float mx = l[0];
  for (long long j = 1; j < V; ++j)
    mx = l[j] > mx ? l[j] : mx;
  double s = 0;
  for (long long j = 0; j < V; ++j)
    s += exp(double(l[j] - mx));
  rowLoss[r] = log(s) + mx - l[t];
}

/// Stage 2: the mean over rows with a target into loss[0], their number
/// into count[0]. p: row losses, loss, count; n: R. One block; thread t
/// takes rows t, t + threads, …; the block sums in thread order.
extern "C" __global__ void attnc_step_cross_entropy(attnc_kargs a) {
  struct Shared {
    double red[attnc::step::kMaxWarps];
  };
  ATTNC_STEP_SHARED(Shared, sm);
  const long long R = a.n[0];
  const double *rowLoss = (const double *)a.p[0];
  double sum = 0, count = 0;
  for (long long r = threadIdx.x; r < R; r += blockDim.x)
    if (rowLoss[r] >= 0)
      sum += rowLoss[r], count += 1;
  sum = attnc::step::blockSum(sum, sm.red);
  count = attnc::step::blockSum(count, sm.red);
  if (threadIdx.x == 0) {
    ((float *)a.p[1])[0] = count > 0 ? float(sum / count) : 0.0f;
    ((float *)a.p[2])[0] = float(count);
  }
}

/// dlogits = f[0]·(softmax − onehot)/count on rows with a target, 0 on the
/// others (f[0]: the loss's gradient, the loss scale under fp16).
/// p: logits, targets, count, dlogits; n: R, V. One block per row.
extern "C" __global__ void attnc_step_cross_entropy_grad(attnc_kargs a) {
  struct Shared {
    float red[attnc::step::kMaxWarps];
  };
  ATTNC_STEP_SHARED(Shared, sm);
  const long long r = blockIdx.x, V = a.n[1];
  const float *l = (const float *)a.p[0] + r * V;
  const int t = ((const int *)a.p[1])[r];
  const float count = ((const float *)a.p[2])[0];
  float *d = (float *)a.p[3] + r * V;
  if (t < 0) {
    for (long long j = threadIdx.x; j < V; j += blockDim.x)
      d[j] = 0;
    return;
  }
  float mx = l[0];
  for (long long j = threadIdx.x; j < V; j += blockDim.x)
    mx = l[j] > mx ? l[j] : mx;
  mx = attnc::step::blockMax(mx, sm.red);
  float s = 0;
  for (long long j = threadIdx.x; j < V; j += blockDim.x)
    s += expf(l[j] - mx);
  s = attnc::step::blockSum(s, sm.red);
  const float scale = count > 0 ? a.f[0] / count : 0.0f;
  for (long long j = threadIdx.x; j < V; j += blockDim.x)
    d[j] = expf(l[j] - mx) / s * scale - (j == t ? scale : 0.0f);
}

/// The first NaN or Inf of x[0, n) into *slot (atomicMin of the index, so
/// the smallest wins whatever the order; *slot starts at ~0). p: x, slot;
/// n: count. The runtime reads the slots once the step is done, instead of
/// a copy of each checked tensor.
extern "C" __global__ void attnc_step_find_nonfinite(attnc_kargs a) {
  const float *x = (const float *)a.p[0];
  unsigned long long *slot = (unsigned long long *)a.p[1];
  const long long n = a.n[0];
  for (long long i = attnc::step::globalThread(); i < n; i += (long long)gridDim.x * blockDim.x) {
    const float v = x[i];
    if ((__float_as_int(v) & 0x7f800000) == 0x7f800000) // exponent all ones: NaN or ±Inf
      atomicMin(slot, (unsigned long long)i);
  }
}

/// y[i] += x[i]. p: y, x; n: count.
extern "C" __global__ void attnc_step_accumulate(attnc_kargs a) {
  const long long i = attnc::step::globalThread();
  if (i < a.n[0])
    ((float *)a.p[0])[i] += ((const float *)a.p[1])[i];
}

#endif // ATTNC_CUDA_MODEL_STEP_CUH
