//===- shared_qk.h - The gradient through shared-QK's key normalisation -*- C++ -*-===//
//
// Shared-QK attention attends with keys k = q / max(|q|, kSharedQkNormFloor)
// (attnc/abi/SharedQk.h). Every backward that runs it, the CPU's and the
// CUDA's dense fallback and LSH kernels alike, folds the keys' gradient back
// into the queries' through that normalisation; this is the fold, per
// element, written once so the four cannot drift apart. Host and device
// code (ATTNC_HD).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_COMMON_SHARED_QK_H
#define ATTNC_COMMON_SHARED_QK_H

#include "attnc/abi/Qualifiers.h"
#include "attnc/abi/SharedQk.h"

namespace attnc {
namespace sharedqk {

/// What element d of the key gradient g adds to the query's gradient:
/// (g_d - k_d (k·g)) / |q| above the floor (a normalised key only turns, so
/// its gradient's component along k is dropped), g_d / floor below it,
/// where the key is q scaled by a constant. `norm` is |q| or max(|q|,
/// floor): both give the same test and, above the floor, the same value;
/// `kg` is k·g over the row.
ATTNC_HD float queryGradFromKey(float g, float k, float kg, float norm) {
  return norm > kSharedQkNormFloor ? (g - k * kg) / norm : g / kSharedQkNormFloor;
}

} // namespace sharedqk
} // namespace attnc

#endif // ATTNC_COMMON_SHARED_QK_H
