//===- lsh_pair.h - Which (query, key) pairs LSH attention keeps -*- C++ -*-===//
//
// The pair semantics both LSH kernel families evaluate on their own tile
// layouts (docs/kernels.md, LSH attention): whether a query keeps a key of
// its chunk window, and the score it gives a kept key. Written once so the
// CPU kernels (kernels/cpu/attnc/lsh_*.h) and the CUDA kernels
// (kernels/cuda/attnc/lsh_common.cuh) cannot drift apart. Host and device
// code (ATTNC_HD).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_COMMON_LSH_PAIR_H
#define ATTNC_COMMON_LSH_PAIR_H

#include "attnc/abi/Qualifiers.h"
#include "attnc/abi/SharedQk.h"

namespace attnc {
namespace lsh {

/// Whether the query at position qi keeps the key at position kj: both are
/// real positions (a pad slot of the sorted order is -1), the key is before
/// kvEnd (key padding; N without it), not after the query in a causal
/// variant, and the variant's mask keeps the pair.
template <class V>
ATTNC_HD bool pairKept(int qi, int kj, int kvEnd, int b, int h, const float *params, int H) {
  bool kept = qi >= 0 && kj >= 0;
  if constexpr (V::kCausal)
    kept = kept && kj <= qi;
  if constexpr (V::kKeyPadding)
    kept = kept && kj < kvEnd;
  if constexpr (V::kHasMask)
    kept = kept && V::keep(b, h, qi, kj, params, H);
  (void)kvEnd, (void)b, (void)h, (void)params, (void)H;
  return kept;
}

/// The score a kept pair gets from its scaled dot product `raw`: the self
/// score kLshSelfScore when the key is the query's own position (shared-QK
/// attention attends to itself only when nothing else is kept), else the
/// variant's modified score.
template <class V>
ATTNC_HD float pairScore(float raw, int qi, int kj, int b, int h, const float *params, int H) {
  if (kj == qi)
    return kLshSelfScore;
  if constexpr (V::kHasScoreMod)
    return V::score(raw, b, h, qi, kj, params, H);
  (void)b, (void)h, (void)params, (void)H;
  return raw;
}

} // namespace lsh
} // namespace attnc

#endif // ATTNC_COMMON_LSH_PAIR_H
