//===- materialised.h - The Linformer paper's materialised baseline --------===//
//
// All B·H score matrices at once (B·H·Nq·Nk floats, allocated per call like
// a framework's bmm output), then a row softmax (key padding from lengths; no
// score modifier or mask), then P·V. Compiled by `attnc bench-linformer`
// like a generated CPU kernel.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_BENCH_MATERIALISED_H
#define ATTNC_CPU_BENCH_MATERIALISED_H

#include "attnc/unfused.h"
#include <algorithm>
#include <cmath>
extern "C" int bench_materialised_fwd(const attnc::AttnFwdArgs *a, int D) {
  using namespace attnc::cpu;
  const int H = a->H, Nq = a->Nq, Nk = a->Nk;
  const std::size_t bhs = std::size_t(a->B) * H, sq = std::size_t(Nq) * D, sk = std::size_t(Nk) * D,
                    ss = std::size_t(Nq) * Nk;
  AlignedBuffer S(bhs * ss), scratch(std::size_t(D) * Nk);
  if (!S.ok() || !scratch.ok())
    return kErrAlloc;
  const float *q = static_cast<const float *>(a->q), *k = static_cast<const float *>(a->k),
              *v = static_cast<const float *>(a->v);
  float *o = static_cast<float *>(a->out);
  for (std::size_t bh = 0; bh < bhs; ++bh)
    detail::unfusedGemm(false, true, Nq, Nk, D, a->scale, q + bh * sq, D, k + bh * sk, D,
                        S.data() + bh * ss, Nk, scratch.data());
  const long long rows = static_cast<long long>(bhs) * Nq;
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < rows; ++r) {
    const int b = static_cast<int>(r / (static_cast<long long>(H) * Nq));
    const int lim = a->lengths ? std::min(std::max(a->lengths[b], 0), Nk) : Nk;
    float *row = S.data() + std::size_t(r) * Nk;
    zeroFloats(row + lim, std::size_t(Nk - lim));
    float mx = kNegInf;
    for (int j = 0; j < lim; ++j)
      mx = std::max(mx, row[j]);
    double sum = 0;
    for (int j = 0; j < lim; ++j)
      sum += (row[j] = expf_fast(row[j] - mx));
    if (lim > 0)
      scaleRow(row, lim, static_cast<float>(1.0 / sum));
    a->lse[r] = lim > 0 ? mx + static_cast<float>(std::log(sum)) : kNegInf;
  }
  for (std::size_t bh = 0; bh < bhs; ++bh)
    detail::unfusedGemm(false, false, Nq, D, Nk, 1.0f, S.data() + bh * ss, Nk, v + bh * sk, D,
                        o + bh * sq, D, scratch.data());
  return kOk;
}

#endif // ATTNC_CPU_BENCH_MATERIALISED_H
