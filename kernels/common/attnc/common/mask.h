//===- mask.h - Which keys a query may keep: one policy, both families ----===//
//
// The key limits and key bands of a Variant (docs/kernels.md), written once
// for the CPU and the CUDA kernels, forward and backward, as
// FlashAttention's mask.h serves both of its directions:
//
//   keyEnd     keys at or past it are excluded: Nk, or the batch's length
//              clamped to [0, Nk] with key padding;
//   keyRange   the keys [begin, end) a block of query rows may keep, cut
//              by causality and the key band (kMaxBack / kMaxAhead, proven
//              by attn-key-band): keys outside are skipped, never masked;
//   queryRange its transpose, for the dK/dV loops.
//
// Element-level masks (Variant::keep, the causal diagonal) stay in the
// families' score loops, which evaluate them on their own tile layouts.
// Host and device code: ATTNC_HD (attnc/abi/Qualifiers.h) makes them device
// functions under NVRTC and plain inline functions on the host.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_COMMON_MASK_H
#define ATTNC_COMMON_MASK_H

#include "attnc/abi/Qualifiers.h"

namespace attnc {
namespace mask {

ATTNC_HD int clampInt(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

/// End of the keys batch element `b` may attend to.
template <class V> ATTNC_HD int keyEnd(const int *lengths, int b, int Nk) {
  if constexpr (V::kKeyPadding) {
    if (lengths != nullptr)
      return clampInt(lengths[b], 0, Nk);
  }
  return Nk;
}

/// Keys [begin, end) that query rows [q0, q0 + rows) may keep, of the
/// keys before `kvEnd`.
template <class V> ATTNC_HD void keyRange(int q0, int rows, int kvEnd, int &begin, int &end) {
  begin = 0;
  end = kvEnd;
  if constexpr (V::kCausal)
    end = end < q0 + rows ? end : q0 + rows;
  if constexpr (V::kHasMaxAhead) {
    const int ahead = q0 + rows + V::kMaxAhead;
    end = end < ahead ? end : (ahead > 0 ? ahead : 0);
  }
  if constexpr (V::kHasMaxBack)
    begin = q0 - V::kMaxBack > 0 ? q0 - V::kMaxBack : 0;
}

/// Query rows [begin, end) of the Nq that may keep a key of [k0, k0 + rows);
/// empty when rows is 0.
template <class V> ATTNC_HD void queryRange(int k0, int rows, int Nq, int &begin, int &end) {
  begin = 0;
  end = rows > 0 ? Nq : 0;
  if constexpr (V::kCausal)
    begin = end < k0 ? end : k0;
  if constexpr (V::kHasMaxAhead) {
    const int first = end < k0 - V::kMaxAhead ? end : k0 - V::kMaxAhead;
    begin = begin > first ? begin : first;
  }
  if constexpr (V::kHasMaxBack) {
    const int last = k0 + rows + V::kMaxBack;
    end = end < last ? end : (last > 0 ? last : 0);
  }
}

} // namespace mask
} // namespace attnc

#endif // ATTNC_COMMON_MASK_H
