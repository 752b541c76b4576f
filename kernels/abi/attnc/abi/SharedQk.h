//===- SharedQk.h - The constants of shared-QK (Reformer) attention -*- C++ -*-===//
//
// Shared-QK attention (DESIGN.md §4, docs/kernels.md) attends with keys
// k_j = q_j / max(|q_j|, kSharedQkNormFloor) and gives a query's own key the
// score kLshSelfScore, so a query attends to itself only when nothing else
// is allowed. attn-expand-lsh writes the self score into the IR, and the
// CPU and CUDA kernels (LSH and its dense fallback) both read these; one
// definition keeps them from drifting. No includes: NVRTC reads it too.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_SHAREDQK_H
#define ATTNC_ABI_SHAREDQK_H

namespace attnc {

/// Floor of the key norm: keys are q / max(|q|, kSharedQkNormFloor).
constexpr float kSharedQkNormFloor = 1e-6f;
/// Score of a query's own key, replacing its (modified) score.
constexpr float kLshSelfScore = -1e5f;

} // namespace attnc

#endif // ATTNC_ABI_SHAREDQK_H
