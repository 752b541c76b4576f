//===- unfused_baseline.h - attnc bench's unfused baseline and peak probes -===//
//
// Compiled like a generated CPU kernel (same compiler, flags and BLAS) by
// `attnc bench`: the unfused attention baseline, the FP32 FMA peak and an
// SGEMM rate, so the fused kernels are measured against this machine.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_BENCH_UNFUSED_BASELINE_H
#define ATTNC_CPU_BENCH_UNFUSED_BASELINE_H

#include "attnc/unfused.h"
#include <cblas.h>
#include <chrono>
#include <vector>
namespace {
struct Dense {
  static constexpr bool kCausal = false, kKeyPadding = false, kHasScoreMod = false,
                        kHasMask = false;
  static constexpr int kNumParams = 0;
  static constexpr bool kHasMaxBack = false, kHasMaxAhead = false;
  static constexpr bool kDropout = false;
  static constexpr int kMaxBack = 0, kMaxAhead = 0;
  static inline float score(float s, int, int, int, int, const float *, int) { return s; }
  static inline float score_grad(float, int, int, int, int, const float *, int, float *) {
    return 1.0f;
  }
  static inline bool keep(int, int, int, int, const float *, int) { return true; }
};
} // namespace
extern "C" int bench_unfused_fwd(const attnc::AttnFwdArgs *a, int headDim) {
  switch (headDim) {
  case 32:
    return attnc::cpu::unfused_fwd<32, Dense>(*a);
  case 64:
    return attnc::cpu::unfused_fwd<64, Dense>(*a);
  case 128:
    return attnc::cpu::unfused_fwd<128, Dense>(*a);
  default:
    return 2;
  }
}
// Peak FP32 rate: independent FMA chains on full-width vectors, one chain
// set per OpenMP thread (what the kernels could reach at best).
#if defined(__AVX512F__)
typedef float vfloat __attribute__((vector_size(64)));
#elif defined(__AVX__)
typedef float vfloat __attribute__((vector_size(32)));
#else
typedef float vfloat __attribute__((vector_size(16)));
#endif
extern "C" double bench_fma_gflops(long iters) {
  double total = 0;
  auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : total)
  {
    vfloat acc[12], a, b;
    for (int i = 0; i < 12; ++i)
      acc[i] = acc[i] - acc[i] + float(i);
    a = a - a + 0.999999f;
    b = b - b + 1e-7f;
    for (long it = 0; it < iters; ++it)
      for (int i = 0; i < 12; ++i)
        acc[i] = acc[i] * a + b;
    float sink = 0;
    for (int i = 0; i < 12; ++i)
      sink += acc[i][0];
    total += 2.0 * 12 * (sizeof(vfloat) / 4) * double(iters) + (sink == 12345.f ? 1 : 0);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return total / s / 1e9;
}
extern "C" double bench_sgemm_gflops(int n, int repeats) {
  std::vector<float> a(size_t(n) * n, 1.0f), b(size_t(n) * n, 0.5f), c(size_t(n) * n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n,
              0.f, c.data(), n);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n,
                0.f, c.data(), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * double(n) / s / 1e9);
  }
  return best;
}

#endif // ATTNC_CPU_BENCH_UNFUSED_BASELINE_H
